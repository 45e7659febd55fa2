"""A reply from the real ``mlx_lm.server`` (default model) asked for in pieces
(``engine.remote.pieces``): it streams, it is the server's one-request reply on both
endpoints, and a server stopped mid-reply leaves every token received. Every timeout here
is a hang guard: the pieces are forced by their size (``piece_tokens``), never by a clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

httpx = pytest.importorskip("httpx")

from tests.support.local_server import mlx_lm_server_process, posts, stop  # noqa: E402

CHAT = [{"role": "user", "content": "Write a long story about a dragon who learns to paint."}]


def _started(workdir: Path):
    from engine.models.load import resolve

    return mlx_lm_server_process(Path(resolve("default")[1]), workdir)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """One server for the tests that leave it running (each counts the posts it makes)."""
    workdir = tmp_path_factory.mktemp("mlx-lm-server")
    with _started(workdir) as (url, proc):
        yield url, proc, workdir


@pytest.fixture()
def own_server(tmp_path: Path):
    """A server of the test's own (it is stopped mid-reply)."""
    with _started(tmp_path) as (url, proc):
        yield url, proc, tmp_path


def _backend(url: str, timeout: float):
    from engine.remote.backend import RemoteBackend

    backend = RemoteBackend(url, timeout=timeout)
    backend.load("")
    return backend


def _run(backend, params, on_step=None, messages=CHAT):
    """(steps, finished, seconds to the first token, seconds to the end)."""
    from engine.api.events import Finished, TokenStep

    rid = backend.start(messages, params).request_id
    steps, done, t0, first = [], None, time.monotonic(), None
    while backend.has_work():
        assert time.monotonic() - t0 < 600
        for e in backend.step():
            if isinstance(e, TokenStep) and e.request_id == rid:
                first = first if first is not None else time.monotonic() - t0
                steps.append(e)
                if on_step is not None:
                    on_step(steps)
            elif isinstance(e, Finished) and e.request_id == rid:
                done = e
    return steps, done, first, time.monotonic() - t0


def test_a_reply_in_pieces_streams_and_equals_one_request(server):
    """A reply the server sends only when done is asked for in pieces (a first of 8 tokens,
    then of 32), so it streams and a timeout bounds one piece. The pieces are forced by
    their size, not by a race with the clock: the timeout is a hang guard (on a busy
    machine a 10 s timeout once failed the first piece).

    Slow: 120 tokens of the default model through mlx_lm.server in pieces, then the same
    reply asked for whole (a minute here, 88 s beside a second ``make test``)."""
    from engine.api.events import TokenStep
    from engine.api.params import SamplingParams

    url, _proc, workdir = server
    backend = _backend(url, timeout=600)
    params = SamplingParams(max_tokens=120, top_logprobs=2)
    firsts: list[int] = []  # the tokens of each step() that returned some

    def step_counted(step=backend.step):
        events = step()
        if any(isinstance(e, TokenStep) for e in events):
            firsts.append(sum(isinstance(e, TokenStep) for e in events))
        return events

    backend.step = step_counted
    try:
        before = posts(workdir)
        steps, done, _, _ = _run(backend, params)
    finally:
        backend.close()
    assert done.error is None and done.finish_reason == "length" and len(steps) == 120
    assert posts(workdir) - before == 1 + (120 - 8 + 31) // 32  # a first piece of 8, then of 32
    assert firsts[0] == 8  # it streamed: the first piece's tokens came before the rest was asked for
    assert done.prompt_tokens > 0 and done.text == "".join(s.text for s in steps)
    # The same reply asked for whole, as mlx_lm.server's own answer: token for token.
    assert [s.token_id for s in steps] == _whole_ids(url, backend, params)


def _whole_ids(url: str, backend, params) -> list[int]:
    """The server's own greedy reply to one whole request: each step's most likely token."""
    from engine.remote.servers import KINDS, build_request

    _, body = build_request(KINDS["mlx_lm"], params, CHAT, "", 0, backend.models[0], True, "auto", None)
    whole = httpx.post(url + "/v1/chat/completions", json=body, timeout=600).json()["choices"][0]
    return [max(e["top_logprobs"], key=lambda a: a["logprob"])["id"] for e in whole["logprobs"]["content"]]


def test_a_reply_whose_tokens_its_text_does_not_spell_is_still_the_servers_own(tiny_folder, tmp_path):
    """The random tiny model's tokens are almost never its tokenizer's split of their text:
    continued from the text, the reply differed from token 8 (the first piece's end). Each
    piece now continues from where the text spells the tokens and drops what it repeats."""
    from engine.api.params import SamplingParams

    with mlx_lm_server_process(tiny_folder, tmp_path) as (url, _proc):
        backend = _backend(url, timeout=600)  # a hang guard
        params = SamplingParams(max_tokens=100, top_logprobs=1)
        try:
            steps, done, _, _ = _run(backend, params)
            want = _whole_ids(url, backend, params)
        finally:
            backend.close()
    assert done.error is None and [s.token_id for s in steps] == want


def test_a_server_stopped_mid_reply_keeps_every_token_received(own_server):
    from engine.api.params import SamplingParams

    url, proc, _ = own_server
    backend = _backend(url, timeout=600)  # a hang guard

    def stop_after_some(steps):
        if len(steps) >= 20 and proc.poll() is None:
            stop(proc)

    try:
        steps, done, _, _ = _run(backend, SamplingParams(max_tokens=300, top_logprobs=2), stop_after_some)
    finally:
        backend.close()
    assert 20 <= len(steps) < 300
    assert done.finish_reason == "error" and done.generated_tokens == len(steps)
    assert done.text == "".join(s.text for s in steps)
    assert f"The reply was cut after {len(steps)} tokens: all {len(steps)} are kept." in done.error


_LLAMA_SCRIPT = """
import sys, time
from tests.support.llamacpp_server import llamacpp_server
with llamacpp_server() as server:
    print(server.url, flush=True)
    time.sleep(3600)
"""


def test_a_llamacpp_server_stopped_mid_reply_keeps_every_token_received(tmp_path):
    """The streaming kinds: llama.cpp's own server (xllamacpp, run in a process of its own
    so that it can be stopped mid-reply) keeps every streamed token, the error saying so."""
    import subprocess
    import sys

    pytest.importorskip("xllamacpp", reason="llama.cpp's server comes with the xllamacpp wheel (dev extra)")
    from engine.api.params import SamplingParams
    from tests.support.paths import ROOT

    proc = subprocess.Popen([sys.executable, "-c", _LLAMA_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), "llama.cpp's server did not start"
        backend = _backend(url, timeout=600)  # a hang guard

        def stop_after_some(steps):
            if len(steps) >= 10 and proc.poll() is None:
                proc.kill()

        try:
            steps, done, _, _ = _run(backend, SamplingParams(max_tokens=1000, top_logprobs=2), stop_after_some)
        finally:
            backend.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert 10 <= len(steps) < 1000
    assert done.finish_reason == "error" and done.generated_tokens == len(steps)
    assert done.text == "".join(s.text for s in steps)
    assert f"The reply was cut after {len(steps)} tokens: all {len(steps)} are kept." in done.error


# --- a reply in pieces is the server's one-request reply, on both endpoints ---------------

ENDPOINT_CASES = [
    # (chat, prompt, what the reply's tokens must show); pieces of one token: every token
    # is a piece's boundary, so a boundary falls inside each character of several tokens.
    (False, "Water boils at", ("space", "digit", "multibyte")),  # " ", "1", "0", "0", "Â°", "C"
    (False, "The first man on the moon landed in 19", ("digit",)),
    (False, "English: good morning\nJapanese:", ("space", "split")),
    (True, "What is 12 times 12? Answer with the number only.", ("digit",)),
    (True, "Translate to Japanese: good morning", ("split",)),
    (True, "Write the degree sign and then the euro sign.", ("multibyte",)),
]


def _shows(steps, what: str) -> bool:
    """Whether the reply's tokens show ``what``: it begins with a space or a digit, holds a
    token of several bytes, or a character split across tokens (a token of no text of its own)."""
    text = "".join(s.text for s in steps)
    return {
        "space": text.startswith(" "),
        "digit": text.lstrip(" ")[:1].isdigit(),
        "multibyte": any(len(s.text.encode()) > len(s.text) for s in steps),
        "split": any(s.text == "" for s in steps[:-1]) and any(ord(c) > 127 for s in steps for c in s.text),
    }[what]


@pytest.mark.parametrize(("chat", "prompt", "shows"), ENDPOINT_CASES)
def test_a_reply_in_pieces_is_the_servers_one_request_reply_on_both_endpoints(server, chat, prompt, shows):
    """Each piece continues from a text the server's tokenizer encodes back to exactly the
    tokens received (the leading space mlx-lm's detokenizer drops kept; a split character
    asked for again): token ids and logprobs are those of one whole request."""
    from engine.api.events import Finished, TokenStep
    from engine.api.params import SamplingParams
    from engine.remote.backend import RemoteBackend

    url, _proc, workdir = server
    # The timeout is a hang guard: the pieces are forced by their size, not by a clock.
    backend = RemoteBackend(url, timeout=600, chat=chat, piece_tokens=(1, 1))
    backend.load("")
    params, messages = SamplingParams(max_tokens=10, top_logprobs=3), [{"role": "user", "content": prompt}]
    try:
        before = posts(workdir)
        rid = backend.start(messages, params).request_id
        events = []
        while backend.has_work():
            events += backend.step()
        asked = posts(workdir) - before
        whole = _whole_reply(url, backend, params, messages, chat)
    finally:
        backend.close()
    steps = [e for e in events if isinstance(e, TokenStep) and e.request_id == rid]
    (done,) = [e for e in events if isinstance(e, Finished)]
    assert done.error is None and asked >= len(steps) > 1  # a piece per token, a split character asked again
    for what in shows:
        assert _shows(steps, what), (what, [s.text for s in steps])
    assert [s.token_id for s in steps] == [t for t, _ in whole]
    assert [s.logprobs[0] for s in steps] == [lp for _, lp in whole]
    assert done.text == "".join(s.text for s in steps)


def _whole_reply(url: str, backend, params, messages, chat: bool) -> list[tuple[int, float]]:
    """The server's own greedy reply to one whole request: (id, logprob) of each step's most
    likely token."""
    from engine.remote.servers import KINDS, build_request

    path, body = build_request(KINDS["mlx_lm"], params, messages, "", 0, backend.models[0], chat, "auto", None)
    answer = httpx.post(url + path, json=body, timeout=600).json()["choices"][0]
    best = [max(e["top_logprobs"], key=lambda a: a["logprob"]) for e in answer["logprobs"]["content"]]
    return [(b["id"], b["logprob"]) for b in best]


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_sampled_reply_continues_only_from_text_that_encodes_to_its_tokens(server, chat, monkeypatch):
    """A drawn token cannot be asked for again: a sampled piece keeps its tokens only up to
    where the reply's text encodes back to exactly them (SmolLM2 often writes a blank line
    as two newline tokens, which the text encodes as one), so every later piece's prompt is
    the prompt followed by exactly the tokens shown; where no token more can be kept, the
    rest is one request."""
    from transformers import AutoTokenizer

    import engine.remote.backend as remote_backend
    from engine.api.params import SamplingParams
    from engine.remote.backend import RemoteBackend
    from engine.remote.template import ChatTemplate

    url, _proc, _ = server
    sent = []  # each request's body, as the backend sends it
    job = remote_backend.Job
    monkeypatch.setattr(remote_backend, "Job", lambda *args: sent.append(args[3]) or job(*args))
    messages = [{"role": "user", "content": "List five fruits, one per paragraph, each with a short sentence."}]
    backend = RemoteBackend(url, timeout=600, chat=chat, piece_tokens=(3, 3))  # the timeout: a hang guard
    backend.load("")
    try:
        steps, done, _, _ = _run(backend, SamplingParams(temperature=1.0, max_tokens=60), messages=messages)
    finally:
        backend.close()
    assert done.error is None and done.text == "".join(s.text for s in steps)
    model = backend.models[0]
    tok = AutoTokenizer.from_pretrained(model)
    base = ChatTemplate(None).render(model, messages) if chat else messages[0]["content"]
    ids, texts = [s.token_id for s in steps], [s.text for s in steps]
    # Every request after the first continues the reply (unseeded, how many pieces come
    # before one is asked whole varies: from the start where the first token's id is unnamed).
    later = [b["prompt"] for b in sent[1:] if "prompt" in b]
    # A piece of which no token could be kept is asked again whole, from the start: on the
    # chat endpoint that is the conversation as it was sent, nothing continued.
    restarts = [b for b in sent[1:] if "prompt" not in b]
    assert all(b["messages"] == messages for b in restarts), restarts
    assert later or restarts or len(steps) <= 3
    for prompt in later:
        assert prompt.startswith(base)
        spelled = [n for n in range(len(ids) + 1) if "".join(texts[:n]) == prompt[len(base) :]]
        assert any(tok(prompt)["input_ids"] == tok(base)["input_ids"] + ids[:n] for n in spelled), prompt
