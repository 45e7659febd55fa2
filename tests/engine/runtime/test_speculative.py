"""Speculative decoding (issue 36): a draft model proposes, the target checks a block in one pass.

The scheme keeps the target's own draw at every position, so a drafted reply must equal
the plain reply token for token, greedy or seeded, alone or batched; the references are the
plain engine, mlx-lm's ``speculative_generate_step`` on the same pair, and a fresh prefill
of the kept tokens (the caches cut back after a rejection)."""

from __future__ import annotations

import math

import mlx.core as mx
import pytest
from mlx_lm.generate import speculative_generate_step
from mlx_lm.models.cache import make_prompt_cache

from engine.api.draft import Coupling, DraftStats, Outcome
from engine.api.errors import EngineError
from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.caches import batch as kv
from engine.models.load import load
from engine.runtime.scheduler import Scheduler
from tests.support.drafts import run_requests, token_ids
from tests.support.tiny_archs import write_tiny_arch
from tests.support.tiny_model import write_tiny_model
from tests.support.tiny_reasoning import write_qwen3_style

PROMPTS = ("The cat sat on the mat", "Once upon a time", "A B C D")


def _params(tiny, **changes) -> SamplingParams:
    """End of sequence allowed: a draft that proposes it is the case that broke replies once."""
    return SamplingParams(**{"max_tokens": 40, "top_logprobs": 3, **changes})


_run, _tokens = run_requests, token_ids


@pytest.mark.parametrize("which", ["near", "far"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_a_drafted_reply_is_the_plain_reply(tiny, which, sampled, request):
    draft = request.getfixturevalue(which)
    params = _params(tiny, temperature=0.9, seed=5) if sampled else _params(tiny)
    (plain,), _, _ = _run(tiny, [(PROMPTS[0], params)])
    (drafted,), (done,), _ = _run(tiny, [(PROMPTS[0], params)], draft=draft, tokens=4)
    assert _tokens(drafted) == _tokens(plain)
    for a, b in zip(drafted, plain, strict=True):  # the target's whole inspection, unchanged
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        assert [c.token_id for c in a.top] == [c.token_id for c in b.top]
    records = [s.draft for s in drafted]
    assert records[0] is None  # the first token comes from the prompt's pass
    outcomes = [r.outcome for r in records if r is not None]
    if which == "near" or sampled:
        assert Outcome.ACCEPTED in outcomes
    assert Outcome.REJECTED in outcomes or Outcome.BONUS in outcomes
    for step, record in zip(drafted, records, strict=True):
        if record is None:
            continue
        if record.outcome is Outcome.BONUS:
            assert record.token_id is None and record.position == record.block
            continue
        assert (record.token_id == step.token_id) == (record.outcome is Outcome.ACCEPTED)
        assert 0 <= record.position < record.block <= 4
        assert record.logprob <= 0 and 0 <= record.classic_accept_probability <= 1
        assert record.drawn_token_id == step.token_id and record.kept == (record.outcome is Outcome.ACCEPTED)
        assert record.coupling is (Coupling.SHARED_NOISE if sampled else Coupling.GREEDY)
        if record.outcome is Outcome.ACCEPTED:  # p is the target's own final logprob of its token
            assert record.target_logprob == pytest.approx(step.logprob, abs=1e-5)
        assert [c.logprob for c in record.top] == sorted((c.logprob for c in record.top), reverse=True)
    stats = done.draft
    assert stats.accepted == outcomes.count(Outcome.ACCEPTED)
    assert stats.tokens == len(outcomes)
    assert stats.proposed == stats.accepted + outcomes.count(Outcome.REJECTED)
    assert stats.passes == sum(r.position == 0 for r in records if r is not None)


def test_a_bigger_block_of_the_same_model_accepts_everything(tiny):
    (steps,), (done,), _ = _run(tiny, [(PROMPTS[1], _params(tiny, max_tokens=21))], draft=tiny, tokens=4)
    assert done.draft == DraftStats(proposed=16, accepted=16, passes=4, tokens=20)
    assert [s.draft.outcome for s in steps[1:6]] == [Outcome.ACCEPTED] * 4 + [Outcome.BONUS]
    assert all(s.draft.classic_accept_probability == pytest.approx(1.0) for s in steps[1:5])


@pytest.mark.parametrize("which", ["near", "far"])
def test_a_batch_with_a_draft_equals_each_row_alone(tiny, which, request):
    draft = request.getfixturevalue(which)
    requests = [
        (PROMPTS[0], _params(tiny)),
        (PROMPTS[1], _params(tiny, temperature=0.8, seed=3, top_k=20, max_tokens=30)),
        (PROMPTS[2], _params(tiny, temperature=1.1, seed=9, repetition_penalty=1.3, presence_penalty=0.4)),
    ]
    together, _, _ = _run(tiny, requests, draft=draft, tokens=3)
    for req, steps in zip(requests, together, strict=True):
        (alone,), _, _ = _run(tiny, [req])
        assert _tokens(steps) == _tokens(alone)


def test_a_live_change_applies_from_the_next_token_as_without_a_draft(tiny, near):
    params = _params(tiny, temperature=0.7, seed=11)
    change = params.with_changes(temperature=1.4, top_k=15)
    (drafted,), _, at = _run(tiny, [(PROMPTS[0], params)], draft=near, tokens=4, change=(7, change))
    (plain,), _, _ = _run(tiny, [(PROMPTS[0], params)], change=(at, change))
    assert _tokens(drafted) == _tokens(plain)
    assert drafted[at].params.top_k == 15 and drafted[at - 1].params.top_k == params.top_k


def test_caches_cut_back_after_rejections_equal_a_fresh_prefill(tiny, far):
    scheduler = Scheduler(tiny, prefill_chunk=512)
    scheduler.set_draft(far, 4)
    prompt = tiny.tokenizer.encode(PROMPTS[0])
    scheduler.insert(prompt, _params(tiny, max_tokens=200))
    rejected = 0
    while rejected < 3:
        rejected += sum(
            isinstance(e, TokenStep) and e.draft is not None and e.draft.outcome is Outcome.REJECTED
            for e in scheduler.step()
        )
    (request,) = scheduler._active
    history = request.history
    assert request.fed == len(history) - 1 == scheduler._batch[0]._idx
    token = mx.array([[history[-1]]])
    kept = scheduler.model(token, cache=scheduler._batch)[0, -1]
    fresh = make_prompt_cache(tiny.model)
    reference = tiny.model(mx.array([history]), cache=fresh)[0, -1]
    assert mx.allclose(kept, reference, atol=1e-4).item()
    rows = scheduler.drafter.rows
    (row,) = [i for i, rid in enumerate(rows.ids) if rid == request.id]
    cached = rows.cached[row]
    assert cached <= len(history) - 1
    caches = kv.extract_row(rows.caches, row)
    draft_kept = far.model(mx.array([history[cached:]]), cache=caches)[0, -1]
    draft_fresh = far.model(mx.array([history]), cache=make_prompt_cache(far.model))[0, -1]
    assert mx.allclose(draft_kept, draft_fresh, atol=1e-4).item()


def test_greedy_equals_mlx_lms_speculative_generate(tiny, near):
    prompt = tiny.tokenizer.encode(PROMPTS[1])
    (ours,), _, _ = _run(tiny, [(PROMPTS[1], SamplingParams(max_tokens=30))], draft=near, tokens=3)
    theirs = [
        int(token)
        for token, _, _ in speculative_generate_step(
            mx.array(prompt), tiny.model, near.model, num_draft_tokens=3, max_tokens=len(ours)
        )
    ]
    assert _tokens(ours) == theirs


def test_a_fork_and_a_branch_with_a_draft_equal_them_without(tiny, near):
    variants = [_params(tiny), _params(tiny, temperature=0.9, seed=2)]
    results = []
    for draft in (None, near):
        scheduler = Scheduler(tiny, prefill_chunk=512)
        if draft is not None:
            scheduler.set_draft(draft, 3)
        ids = scheduler.fork(tiny.tokenizer.encode(PROMPTS[2]), variants)
        steps: dict[int, list[int]] = {i: [] for i in ids}
        while scheduler.has_work():
            for e in scheduler.step():
                if isinstance(e, TokenStep):
                    steps.setdefault(e.request_id, []).append(e.token_id)
        branch = scheduler.branch(ids[1], 10, steps[ids[0]][10])
        while scheduler.has_work():
            for e in scheduler.step():
                if isinstance(e, TokenStep):
                    steps.setdefault(e.request_id, []).append(e.token_id)
        results.append([steps[i] for i in (*ids, branch)])
    assert results[0] == results[1]


def test_a_draft_that_cannot_serve_is_refused_and_changes_nothing(tiny, near, tmp_path):
    scheduler = Scheduler(tiny, prefill_chunk=512)
    other = load(str(write_qwen3_style(tmp_path / "other")))
    with pytest.raises(EngineError, match="vocabulary"):
        scheduler.set_draft(other)
    for tokens in (0, 17, 2.5, True):
        with pytest.raises(EngineError, match="draft tokens"):
            scheduler.set_draft(near, tokens)
    assert scheduler.drafter is None
    windowed = load(str(write_tiny_arch(tmp_path / "gemma", "gemma3_text")))
    with pytest.raises(EngineError, match="cut back"):
        Scheduler(windowed, prefill_chunk=512).set_draft(windowed)
    with pytest.raises(EngineError, match="cut back"):
        scheduler.set_draft(windowed)
    assert scheduler.drafter is None
    scheduler.set_draft(near, 2)
    scheduler.set_draft(None)
    (steps,), _, _ = _run(tiny, [(PROMPTS[0], _params(tiny, max_tokens=5))])
    assert all(s.draft is None for s in steps)


def test_the_classic_accept_probability_is_min_one_p_over_q():
    from engine.api.draft import DraftRecord

    record = DraftRecord(Outcome.REJECTED, 1, 3, 7, math.log(0.5), math.log(0.2))
    assert record.classic_accept_probability == pytest.approx(0.4)
    assert DraftRecord(Outcome.ACCEPTED, 0, 3, 7, math.log(0.2), math.log(0.5)).classic_accept_probability == 1.0
    assert DraftRecord(Outcome.REJECTED, 0, 3, 7, math.log(0.2), -math.inf).classic_accept_probability == 0.0
    assert DraftRecord(Outcome.BONUS, 3, 3, None, None, None).classic_accept_probability is None


@pytest.mark.slow
def test_the_default_model_drafted_by_its_own_q4_0_requantization(smollm, tmp_path_factory):
    """The real pair: SmolLM2-135M Q4_1 (float32) checked, its weights re-quantized to Q4_0
    (gguf-py's quantizer) drafting, end of sequence allowed; greedy equals the plain reply
    and mlx-lm's speculative generate on the same two loaded models, with proposals both
    accepted and rejected; and so does a draft of it that proposes the end where the model
    goes on."""
    from engine.models.load import default_model_path
    from tests.support.drafts import ending_early
    from tools.requantize import requantize

    gguf = tmp_path_factory.mktemp("q4_0") / "smollm2-135m-q4_0.gguf"
    requantize(default_model_path(), gguf, "Q4_0")
    draft = load(str(gguf))
    prompt = "Once upon a time, a lighthouse keeper"  # a raw prompt the model goes on from
    params = SamplingParams(max_tokens=14, top_logprobs=3)
    (plain,), _, _ = _run(smollm, [(prompt, params)])
    (drafted,), (done,), _ = _run(smollm, [(prompt, params)], draft=draft, tokens=3)
    assert _tokens(drafted) == _tokens(plain)
    outcomes = {s.draft.outcome for s in drafted if s.draft is not None}
    assert {Outcome.ACCEPTED, Outcome.REJECTED} <= outcomes
    assert 0 < done.draft.acceptance_rate < 1
    theirs = [
        int(token)
        for token, _, _ in speculative_generate_step(
            mx.array(smollm.tokenizer.encode(prompt)),
            smollm.model,
            draft.model,
            num_draft_tokens=3,
            max_tokens=len(drafted),
        )
    ]
    assert _tokens(drafted) == theirs
    (ending,), _, _ = _run(smollm, [(prompt, params)], draft=ending_early(draft, every=2), tokens=3)
    assert _tokens(ending) == _tokens(plain)
    for a, b in zip(ending, plain, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    eos = min(smollm.eos_token_ids)
    assert any(s.draft is not None and s.draft.token_id == eos for s in ending)


def test_the_session_loads_refuses_and_releases_a_draft(tiny_folder, tmp_path):
    from engine.api.draft import DraftModel
    from engine.session.session import EngineSession
    from tests.support.tiny_reasoning import write_qwen3_style

    session = EngineSession(prefill_chunk=64)
    session.load(str(tiny_folder))
    near = write_tiny_model(tmp_path / "near", seed=0, dtype="bfloat16")
    held = session.load_draft(str(near), tokens=4)
    assert held == DraftModel("near", str(near), "float32", 4) and session.draft_model() == held
    with pytest.raises(EngineError, match="vocabulary"):
        session.load_draft(str(write_qwen3_style(tmp_path / "other")))
    assert session.draft_model() == held  # the refused one changed nothing
    session.start([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8))
    steps = []
    while session.has_work():
        steps += [e for e in session.step() if isinstance(e, TokenStep)]
    assert any(s.draft is not None for s in steps)
    session.release_draft()
    assert session.draft_model() is None and session.scheduler.drafter is None
    session.load_draft(str(near))
    session.load(str(tiny_folder))  # another model: no draft until one is loaded for it
    assert session.draft_model() is None and session.scheduler.drafter is None


def test_draft_records_round_trip_through_every_codec_style(tiny, near):
    from engine.api.codec import CLI, EXPORT, STORE, decode_step, encode_step

    (steps,), _, _ = _run(tiny, [(PROMPTS[0], _params(tiny, max_tokens=12))], draft=near, tokens=3)
    drafted = [s for s in steps if s.draft is not None]
    assert {s.draft.outcome for s in drafted} >= {Outcome.ACCEPTED, Outcome.BONUS}
    for style in (CLI, EXPORT, STORE):
        for step in steps:
            data = encode_step(step, style, step.params.to_dict())
            assert ("draft" in data) == (step.draft is not None)
            back = decode_step(data).draft
            if step.draft is None:
                assert back is None
                continue
            assert (back.outcome, back.position, back.block, back.token_id, back.drawn_token_id, back.coupling) == (
                step.draft.outcome,
                step.draft.position,
                step.draft.block,
                step.draft.token_id,
                step.token_id,
                Coupling.GREEDY,
            )
            assert back.logprob == pytest.approx(step.draft.logprob, abs=1e-4)
            assert [c.token_id for c in back.top] == [c.token_id for c in step.draft.top]


def test_a_block_never_runs_past_max_tokens_or_either_models_context(tiny, near):
    from dataclasses import replace

    from engine.runtime.requests import new_request
    from engine.runtime.speculative import Drafter, block_size

    request = new_request(0, [1] * 100, SamplingParams(max_tokens=50), tiny.tokenizer.decode)
    request.generated = [2] * 10
    drafter = Drafter(tiny, near, 4, None, None)
    assert block_size(drafter, request, 512) == 4
    assert block_size(drafter, request, 113) == 2  # three positions left in the model's context
    assert block_size(drafter, request, 111) == 0  # one: a plain step
    request.generated = [2] * 47  # three tokens left of max_tokens: two proposals and the model's own
    assert block_size(drafter, request, 512) == 2
    request.generated = [2] * 10
    short = Drafter(tiny, replace(near, context_length=112), 4, None, None)
    assert block_size(short, request, 512) == 1  # the draft's context
    past = Drafter(tiny, replace(near, context_length=110), 4, None, None)
    assert block_size(past, request, 512) == 0  # no block: the step is a plain one
