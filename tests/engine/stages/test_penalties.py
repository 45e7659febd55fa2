"""Incremental penalty counts against a full recount and a plain NumPy reference."""

import mlx.core as mx
import numpy as np
import pytest

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.runtime.scheduler import Scheduler
from engine.stages.penalty_counts import PenaltyCounts, leaving_token
from tests.support.chain_util import run

V = 97
PARAMS = [
    SamplingParams(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.2, penalty_window=8),
    SamplingParams(repetition_penalty=0.8, presence_penalty=-0.3, frequency_penalty=0.5, penalty_window=0),
    SamplingParams(repetition_penalty=1.1, penalty_window=3),
]


def recount(histories: list[list[int]], windows: list[int], vocab: int) -> PenaltyCounts:
    """From-scratch counts of each row's last ``window`` tokens (0: all), by NumPy."""
    rows = [
        np.bincount(np.asarray(h[-w:] if w > 0 else h, np.int64), minlength=vocab).astype(np.int32)[:vocab]
        for h, w in zip(histories, windows, strict=True)
    ]
    return PenaltyCounts.of_rows(rows, vocab)


def numpy_reference(logits: np.ndarray, history: list[int], p: SamplingParams) -> np.ndarray:
    """Penalties written the plain way, straight from the history."""
    window = history[-p.penalty_window :] if p.penalty_window else history
    out = logits.astype(np.float64).copy()
    for token in set(window):
        count = window.count(token)
        value = out[token]
        value = value / p.repetition_penalty if value > 0 else value * p.repetition_penalty
        out[token] = value - p.presence_penalty - p.frequency_penalty * count
    return out


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_incremental_counts_match_rebuild_and_reference(dtype):
    rng = np.random.default_rng(1)
    histories = [list(rng.integers(0, V, size=n)) for n in (5, 12, 2)]
    histories = [[int(t) for t in h] for h in histories]
    windows = [p.penalty_window for p in PARAMS]
    counts = recount(histories, windows, V)
    for _ in range(45):
        logits = mx.array(rng.normal(0, 3, size=(3, V)).astype(np.float32)).astype(dtype)
        incremental = run(logits, PARAMS, counts=counts.counts).output("penalties")
        rebuilt_counts = recount(histories, windows, V)
        rebuilt = run(logits, PARAMS, counts=rebuilt_counts.counts).output("penalties")
        np.testing.assert_array_equal(np.array(counts.counts), np.array(rebuilt_counts.counts))
        np.testing.assert_array_equal(np.array(incremental), np.array(rebuilt))
        as_f32 = np.array(logits.astype(mx.float32))
        for row, p in enumerate(PARAMS):
            ref = numpy_reference(as_f32[row], histories[row], p)
            np.testing.assert_allclose(np.array(incremental)[row], ref, atol=1e-5, rtol=0)
        # Draw from the history's own tail so tokens repeat and leave windows.
        tokens = [int(rng.choice(h[-4:])) if rng.random() < 0.6 else int(rng.integers(V)) for h in histories]
        leaving = [leaving_token(w, h, [t]) for h, t, w in zip(histories, tokens, windows, strict=True)]
        counts.accept(tokens, leaving)
        for h, t in zip(histories, tokens, strict=True):
            h.append(t)


def test_no_penalty_rows_skip_the_stage():
    params = [
        SamplingParams(),
        SamplingParams(penalty_window=4),
        SamplingParams(repetition_penalty=1.5, samplers=("top_k",)),
    ]
    logits = mx.array(np.ones((2, V), np.float32))
    counts = mx.ones((2, V), dtype=mx.int32)
    out = run(logits, params[:2], counts=counts)
    assert "penalties" not in out.chain
    np.testing.assert_array_equal(np.array(out.outputs[-1]), np.array(logits))
    # A penalty whose stage is left out of the order does not run either.
    assert "penalties" not in run(logits[:1], params[2:], counts=counts[:1]).chain


def hf_reference_greedy(model, prompt, steps, penalty):
    """Greedy under Hugging Face's own ``RepetitionPenaltyLogitsProcessor`` over the whole
    context: the model's logits from a plain forward pass over every token (no cache), the
    penalty by transformers. Returns the tokens and each step's log-softmax after the penalty."""
    import torch
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    processor = RepetitionPenaltyLogitsProcessor(penalty)
    tokens = list(prompt)
    out, logprobs = [], []
    for _ in range(steps):
        logits = np.array(model(mx.array(tokens)[None])[0, -1].astype(mx.float32))
        scores = processor(torch.tensor([tokens]), torch.from_numpy(logits)[None])[0]
        token = int(torch.argmax(scores))
        tokens.append(token)
        out.append(token)
        logprobs.append(torch.log_softmax(scores.double(), dim=-1).numpy())
    return out, logprobs


def run_alone(loaded, prompt, params):
    scheduler = Scheduler(loaded)
    rid = scheduler.insert(prompt, params)
    steps = []
    while scheduler.has_work():
        steps += [e for e in scheduler.step() if isinstance(e, TokenStep) and e.request_id == rid]
    return steps, scheduler


def test_greedy_repetition_penalty_matches_hf_reference(tiny):
    prompt = tiny.tokenizer.encode("the theme of the thin thing")
    params = SamplingParams(repetition_penalty=1.3, penalty_window=0, max_tokens=20, top_logprobs=20)
    steps, _ = run_alone(tiny, prompt, params)
    tokens, logprobs = hf_reference_greedy(tiny.model, prompt, 20, 1.3)
    assert [s.token_id for s in steps] == tokens
    # The penalized distribution too, not only its argmax: a penalty wrong on negative
    # logits (divided, not multiplied) leaves the argmax and moves every logprob.
    for step, expected in zip(steps, logprobs, strict=True):
        at = step.chain.index("penalties")
        assert step.top, "the step reports no candidates"
        got = [c.logprobs[at] for c in step.top]
        np.testing.assert_allclose(got, [expected[c.token_id] for c in step.top], atol=1e-4, rtol=0)


def test_scheduler_counts_equal_a_recount_mid_generation(tiny):
    prompt = tiny.tokenizer.encode("abcabcabc")
    scheduler = Scheduler(tiny)
    params = SamplingParams(temperature=1.0, seed=4, frequency_penalty=0.5, penalty_window=6, max_tokens=30)
    ids = [
        scheduler.insert(prompt, params),
        scheduler.insert(prompt[:4], params.with_changes(penalty_window=0)),
    ]
    for _ in range(15):
        scheduler.step()
    active = scheduler._active
    assert [r.id for r in active] == ids
    expected = recount([r.history for r in active], [r.params.penalty_window for r in active], tiny.vocab_size)
    counts = scheduler._sampling.states["penalties"]
    np.testing.assert_array_equal(np.array(counts.device.counts), np.array(expected.counts))
    # A changed window is recounted from the history when the chain next reads the counts.
    scheduler.update_params(ids[0], params.with_changes(penalty_window=2))
    assert counts.device is None
    scheduler.step()
    active = scheduler._active
    expected = recount([r.history for r in active], [r.params.penalty_window for r in active], tiny.vocab_size)
    np.testing.assert_array_equal(np.array(counts.device.counts), np.array(expected.counts))


def test_candidate_counts_are_the_window_counts_with_penalties_on_or_off(tiny):
    """Every candidate's ``count`` is its count in the row's window before the step (the
    host's), whether the penalties run or not, across live changes that switch them on and
    off (the device's counts dropped and made again) and change the window."""
    prompt = tiny.tokenizer.encode("abcabcabc abc")
    plain = SamplingParams(temperature=1.0, seed=3, penalty_window=5, max_tokens=40, top_logprobs=12)
    penalised = plain.with_changes(frequency_penalty=0.4, penalty_window=0)
    changes = {6: penalised, 14: plain.with_changes(penalty_window=2), 22: penalised.with_changes(penalty_window=3)}
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, plain)
    history, window, checked = list(prompt), plain.penalty_window, 0
    while scheduler.has_work():
        for step in (e for e in scheduler.step() if isinstance(e, TokenStep)):
            seen = history[-window:] if window else history
            for candidate in step.top:
                assert candidate.count == seen.count(candidate.token_id), (step.index, candidate.token_id)
                checked += candidate.count > 0
            history.append(step.token_id)
            if step.index in changes and scheduler.is_live(rid):
                scheduler.update_params(rid, changes[step.index])
                window = changes[step.index].penalty_window
    assert len(history) == len(prompt) + 40 and checked > 20


WINDOWS = (1, 2, 3, 0)


def _penalised_run(tiny, sample_ahead: bool, two_groups: bool) -> list[list[int]]:
    """Rows with windows of 1, 2, 3 and all, finishing apart, one joining late and one
    changing its window live; after every step the device's counts must equal a NumPy
    recount of the running rows' histories. Returns each row's tokens (the extra row's apart)."""
    prompt = tiny.tokenizer.encode("abcabcabc abc")
    scheduler = Scheduler(tiny, sample_ahead=sample_ahead)

    def params(i: int, window: int) -> SamplingParams:
        return SamplingParams(
            temperature=1.0,
            seed=i,
            frequency_penalty=2.0,
            presence_penalty=1.0,
            penalty_window=window,
            max_tokens=10 + 3 * i,
            top_logprobs=3,
        )

    ids = [scheduler.insert(prompt[i:], params(i, w)) for i, w in enumerate(WINDOWS)]
    if two_groups:  # another stage order: two groups, whose counts are scattered in
        scheduler.insert(prompt, params(7, 2).with_changes(samplers=("penalties", "temperature"), max_tokens=40))
    tokens: dict[int, list[int]] = {}
    counts, steps = scheduler._sampling.states["penalties"], 0
    while scheduler.has_work():
        for event in scheduler.step():
            if isinstance(event, TokenStep):
                tokens.setdefault(event.request_id, []).append(event.token_id)
        steps += 1
        if steps == 4:
            ids.append(scheduler.insert(prompt[2:], params(5, 2)))
        if steps == 6 and scheduler.is_live(ids[0]):
            scheduler.update_params(ids[0], params(0, 2))
        active = scheduler._active
        if counts.device is not None and active:
            windows = [r.params.penalty_window for r in active]
            expected = recount([r.history for r in active], windows, tiny.vocab_size)
            np.testing.assert_array_equal(np.array(counts.device.counts), np.array(expected.counts), err_msg=str(steps))
    return [tokens[rid] for rid in ids]


def test_counts_the_step_updates_equal_a_recount_and_the_scattered_counts(tiny):
    """The compiled step's own update of the counts (``next_counts``, a whole-batch group),
    sampled ahead or not, equals a recount after every step, and draws the same tokens as
    counts scattered in (two groups)."""
    whole = _penalised_run(tiny, sample_ahead=True, two_groups=False)
    assert whole == _penalised_run(tiny, sample_ahead=False, two_groups=False)
    assert whole == _penalised_run(tiny, sample_ahead=True, two_groups=True)
    assert sum(map(len, whole)) > 60
