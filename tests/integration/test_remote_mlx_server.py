"""The remote backend against a real ``mlx_lm.server`` running the default model.

The server is started once for the session on 127.0.0.1 with the folder the engine
converts the default GGUF into, and stopped afterwards. mlx_lm.server reports logprobs
after its logits processors and before temperature and truncation: with no bias or
penalties that is the local engine's ``raw`` stage, so greedy replies must agree token
for token, and every reported logprob within 1e-3 of the local engine's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

httpx = pytest.importorskip("httpx")

from tests.support.local_server import mlx_lm_server  # noqa: E402

TOL = 1e-3
PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
N = 8


@pytest.fixture(scope="session")
def mlx_server(tmp_path_factory: pytest.TempPathFactory):
    from engine.models.load import resolve

    with mlx_lm_server(Path(resolve("default")[1]), tmp_path_factory.mktemp("mlx-server")) as url:
        yield url


@pytest.fixture(scope="session")
def local():
    from engine.session.session import EngineSession

    session = EngineSession()
    # mlx_lm.server computes in the weights' stored float16; the engine's auto would be
    # float32, whose numbers differ from it by more than the tolerance.
    session.load("default", precision="float16")
    return session


LOCAL_DONE: dict[int, str] = {}


def _run_local(session, prompt_ids, params):
    """The local engine's TokenSteps; its finish reason goes to LOCAL_DONE[id(steps)]."""
    from engine.api.events import Finished, TokenStep

    rid = session.scheduler.insert(prompt_ids, params)
    steps = []
    while session.has_work():
        for e in session.step():
            if isinstance(e, TokenStep) and e.request_id == rid:
                steps.append(e)
            elif isinstance(e, Finished) and e.request_id == rid:
                LOCAL_DONE[id(steps)] = e.finish_reason
    return steps


def _run_remote(backend, start):
    from engine.api.events import Finished, TokenStep

    ids = start if isinstance(start, list) else [start]
    steps, done = {i: [] for i in ids}, {}
    deadline = time.monotonic() + 120
    while backend.has_work():
        assert time.monotonic() < deadline
        for e in backend.step():
            if isinstance(e, TokenStep):
                steps[e.request_id].append(e)
            elif isinstance(e, Finished):
                done[e.request_id] = e
    return steps, done


def _remote(url, **kw):
    from engine.remote.backend import RemoteBackend

    # Minutes, not the default minute: a loaded 2-core CI machine runs the server's queued
    # requests one after another, and the last may wait longer than that for its first byte.
    kw.setdefault("timeout", 300.0)
    backend = RemoteBackend(url, **kw)
    backend.load("")
    return backend


def _compare(local_steps, remote_steps):
    """Max |Δ logprob| over the chosen tokens and over the reported alternatives."""
    assert [s.token_id for s in remote_steps] == [s.token_id for s in local_steps]
    assert "".join(s.text for s in remote_steps) == "".join(s.text for s in local_steps)
    chosen = alts = 0.0
    for loc, rem in zip(local_steps, remote_steps, strict=True):
        assert rem.chain == ("raw",) and rem.reported_stage == "raw"
        assert rem.entropies == (None,) and rem.survivors == (None,)  # not reported
        chosen = max(chosen, abs(rem.logprob_at("raw") - loc.logprob_at("raw")))
        local_raw = {c.token_id: c.logprobs[0] for c in loc.top}
        for c in rem.top:
            assert c.token_id in local_raw, "the server's top-k must be among the local raw top-k"
            alts = max(alts, abs(c.logprobs[0] - local_raw[c.token_id]))
            assert c.raw_logit is None and c.count is None
    return chosen, alts


def test_greedy_text_parity(mlx_server, local):
    from engine.api.params import SamplingParams
    from engine.runtime.prompts import encode_text

    params = SamplingParams(max_tokens=N, top_logprobs=10)
    want = _run_local(local, encode_text(local.scheduler.loaded.tokenizer, PROMPT), params)
    backend = _remote(mlx_server, chat=False)
    try:
        assert backend.info.server == "mlx_lm" and backend.info.stage_detected
        rid = backend.start([{"role": "user", "content": PROMPT}], params).request_id
        steps, done = _run_remote(backend, rid)
    finally:
        backend.close()
    chosen, alts = _compare(want, steps[rid])
    assert chosen < TOL and alts < TOL
    assert done[rid].finish_reason == LOCAL_DONE[id(want)] and done[rid].text == "".join(s.text for s in want)
    print(f"text parity: {N} tokens equal, max |Δ| chosen {chosen:.2e}, alternatives {alts:.2e}")


def test_greedy_chat_parity_and_concurrent_compare(mlx_server, local):
    """Three requests at once (compare): each equals its local reply."""
    from engine.api.params import SamplingParams

    plain = SamplingParams(max_tokens=N, top_logprobs=10)
    variants = [plain, plain.with_changes(top_logprobs=5, max_tokens=6), plain.with_changes(max_tokens=4)]
    wants = [_run_local(local, local.prompt_for(CHAT), p) for p in variants]
    backend = _remote(mlx_server)
    try:
        rids = [backend.start(CHAT, p).request_id for p in variants]
        steps, done = _run_remote(backend, rids)
    finally:
        backend.close()
    worst = 0.0
    for want, rid, p in zip(wants, rids, variants, strict=True):
        assert steps[rid], done.get(rid)  # no token at all: the Finished event says why
        chosen, alts = _compare(want, steps[rid])
        worst = max(worst, chosen, alts)
        assert len(steps[rid]) == p.max_tokens and all(len(s.top) <= p.top_logprobs + 1 for s in steps[rid])
        assert done[rid].finish_reason == LOCAL_DONE[id(want)]
    assert worst < TOL
    print(f"chat parity (3 concurrent): max |Δ| {worst:.2e}")


def test_branch_continues_from_text_like_the_local_engine(mlx_server, local):
    from engine.api.events import TokenStep
    from engine.api.params import SamplingParams
    from engine.runtime.prompts import encode_text

    params = SamplingParams(max_tokens=N, top_logprobs=3)
    first = _run_local(local, encode_text(local.scheduler.loaded.tokenizer, PROMPT), params)
    forced = first[2].top[1]  # the runner-up at index 2
    prompt_ids = encode_text(local.scheduler.loaded.tokenizer, PROMPT)
    rid_local = local.scheduler.continue_output(prompt_ids, [s.token_id for s in first[:2]], forced.token_id, params)
    want = []
    while local.has_work():
        want += [e for e in local.step() if isinstance(e, TokenStep) and e.request_id == rid_local]
    backend = _remote(mlx_server, chat=False)
    try:
        rid = backend.continue_reply(
            [{"role": "user", "content": PROMPT}],
            [s.token_id for s in first[:2]],
            forced.token_id,
            params,
            output_text="".join(s.text for s in first[:2]),
            forced_text=forced.text,
        ).request_id
        steps, done = _run_remote(backend, rid)
    finally:
        backend.close()
    got = steps[rid]
    assert got[0].forced and got[0].index == 2 and got[0].text == forced.text and got[0].logprobs == (None,)
    assert [s.index for s in got] == list(range(2, N))
    assert [s.token_id for s in got] == [s.token_id for s in want]
    assert done[rid].text == "".join(s.text for s in first[:2]) + "".join(s.text for s in got)


def test_live_change_before_the_reply_arrives_restarts_with_the_new_settings(mlx_server, local):
    """mlx_lm.server answers only when the reply is done: a change before that restarts it."""
    from engine.api.params import SamplingParams

    params = SamplingParams(max_tokens=4, top_logprobs=2)
    first = _run_local(local, local.prompt_for(CHAT), params)[0].token_id
    backend = _remote(mlx_server)
    try:
        rid = backend.start(CHAT, params).request_id
        backend.update_params(rid, params.with_changes(logit_bias={first: -100.0}))
        steps, done = _run_remote(backend, rid)
    finally:
        backend.close()
    got = steps[rid]
    assert got and got[0].token_id != first and all(s.params.logit_bias == {first: -100.0} for s in got)
    assert got[0].chain == ("bias",)  # after logit bias, the processors mlx_lm.server applies
    assert done[rid].finish_reason == "length"


def test_a_seeded_sampled_reply_is_read_from_one_request_and_repeats(mlx_server):
    """The chosen tokens come from the reply's text among its top lists (one request); the
    ones read are the list's own numbers, and on this machine the seed repeats the reply."""
    from engine.api.params import SamplingParams

    params = SamplingParams(temperature=0.7, seed=7, max_tokens=8, top_logprobs=10)
    backend = _remote(mlx_server)
    try:
        runs = []
        for _ in range(2):
            rid = backend.start(CHAT, params).request_id
            runs.append(_run_remote(backend, rid)[0][rid])
    finally:
        backend.close()
    assert [s.token_id for s in runs[0]] == [s.token_id for s in runs[1]]
    assert sum(s.token_id is not None for s in runs[0]) >= len(runs[0]) // 2
    for s in runs[0]:
        if s.token_id is not None:
            listed = {c.token_id: c.logprobs[0] for c in s.top}
            assert s.token_id in listed and abs(listed[s.token_id] - s.logprobs[0]) < 1e-6


def test_cancel_and_cli_remote_json(mlx_server, capsys):
    from engine.api.params import SamplingParams
    from engine.cli.main import main

    backend = _remote(mlx_server)
    try:
        rid = backend.start(CHAT, SamplingParams(max_tokens=64)).request_id
        backend.cancel(rid)
        _, done = _run_remote(backend, rid)
    finally:
        backend.close()
    assert done[rid].finish_reason == "cancelled"
    args = ["generate", "--server", mlx_server, "--prompt", PROMPT, "--max-tokens", "3", "--top-logprobs", "2"]
    assert main(args) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["type"] for r in records] == ["token"] * 3 + ["done"]
    tok = records[0]
    assert tok["chain"] == ["raw"] and tok["entropies"] == {"raw": None} and tok["survivors"] == {"raw": None}
    assert tok["entropy"] is None and tok["top"][0]["raw_logit"] is None and tok["logprob"] == tok["raw_logprob"]
    assert records[-1]["prompt_tps"] is None and records[-1]["finish_reason"] == "length"


def test_chat_branch_through_a_local_chat_template(mlx_server, local):
    """mlx_lm.server cannot continue an assistant message; with the model's template
    rendered here (read from the served folder) the branch goes through /v1/completions and
    equals the local one; where no template is readable the branch is refused, saying why."""
    from engine.api.errors import EngineError
    from engine.api.events import TokenStep
    from engine.api.params import SamplingParams
    from engine.models.load import resolve

    params = SamplingParams(max_tokens=6, top_logprobs=3)
    first = _run_local(local, local.prompt_for(CHAT), params)
    forced = first[1].top[1]
    started = local.continue_reply(CHAT, [first[0].token_id], forced.token_id, params)
    want = []
    while local.has_work():
        want += [e for e in local.step() if isinstance(e, TokenStep) and e.request_id == started.request_id]
    plain = _remote(mlx_server, chat_template=str(Path(resolve("default")[1]) / "missing"))
    try:  # no readable template: refused, with why
        with pytest.raises(EngineError, match="cannot continue an assistant message.*was not read"):
            plain.continue_reply(
                CHAT, [first[0].token_id], forced.token_id, params, output_text=first[0].text, forced_text=forced.text
            )
    finally:
        plain.close()
    # No chat_template given: the served model's id is its folder here, whose template is read.
    backend = _remote(mlx_server)
    try:
        rid = backend.continue_reply(
            CHAT, [first[0].token_id], forced.token_id, params, output_text=first[0].text, forced_text=forced.text
        ).request_id
        steps, _ = _run_remote(backend, rid)
    finally:
        backend.close()
    assert [s.token_id for s in steps[rid]] == [s.token_id for s in want]
