"""Continuous batching on the tiny model: joins, chunked prefill, live changes, branches,
prefix reuse, stops and input validation."""

import dataclasses
import math

import numpy as np
import pytest

from engine.api.errors import EngineError
from engine.api.events import Finished, PrefillProgress, TokenStep
from engine.api.params import SamplingParams, SamplingParamsError
from engine.runtime.scheduler import Scheduler

SAMPLED = SamplingParams(temperature=1.0, top_p=0.95, seed=11, max_tokens=12, repetition_penalty=1.2, top_logprobs=3)


def letters_bias(loaded, value=30.0):
    """Restrict the tiny model to lowercase letters, so its output is readable text."""
    ids = {loaded.tokenizer.encode(c)[0] for c in "abcdefghijklmnopqrstuvwxyz"}
    return {i: value for i in ids}


def run(scheduler, until=None):
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def tokens_of(events, rid):
    return [e.token_id for e in events if isinstance(e, TokenStep) and e.request_id == rid]


def finished_of(events, rid):
    (done,) = [e for e in events if isinstance(e, Finished) and e.request_id == rid]
    return done


def alone(loaded, prompt, params, **kwargs):
    scheduler = Scheduler(loaded, **kwargs)
    rid = scheduler.insert(prompt, params)
    events = run(scheduler)
    return tokens_of(events, rid), finished_of(events, rid), events


@pytest.fixture
def prompt(tiny):
    return tiny.tokenizer.encode("the cat sat on the mat")


def test_same_seed_same_tokens_and_other_seed_differs(tiny, prompt):
    a, _, _ = alone(tiny, prompt, SAMPLED)
    b, _, _ = alone(tiny, prompt, SAMPLED)
    c, _, _ = alone(tiny, prompt, SAMPLED.with_changes(seed=12))
    assert a == b
    assert a != c


def test_alone_and_in_a_batch_give_the_same_tokens(tiny, prompt):
    others = [
        (tiny.tokenizer.encode("in the heat"), SAMPLED.with_changes(seed=1, top_k=5)),
        (prompt, SamplingParams(max_tokens=9)),
        (prompt[:3], SAMPLED.with_changes(seed=2, min_p=0.1, frequency_penalty=0.3)),
    ]
    expected = [alone(tiny, p, params)[0] for p, params in [(prompt, SAMPLED), *others]]
    scheduler = Scheduler(tiny)
    ids = [scheduler.insert(prompt, SAMPLED)]
    events = scheduler.step() + scheduler.step()  # the first request is already decoding
    ids += [scheduler.insert(p, params) for p, params in others]
    events += run(scheduler)
    assert [tokens_of(events, i) for i in ids] == expected


def test_chunked_prefill_keeps_other_rows_decoding(tiny, prompt):
    scheduler = Scheduler(tiny, prefill_chunk=4)
    first = scheduler.insert(prompt[:2], SamplingParams(max_tokens=40))
    for _ in range(2):
        scheduler.step()
    long_prompt = prompt * 3
    second = scheduler.insert(long_prompt, SamplingParams(max_tokens=5))
    interleaved = 0
    while True:
        events = scheduler.step()
        progress = [e for e in events if isinstance(e, PrefillProgress) and e.request_id == second]
        if progress and tokens_of(events, first):
            interleaved += 1
        if progress and progress[0].done == len(long_prompt):
            break
    assert interleaved == math.ceil(len(long_prompt) / 4)
    run(scheduler)


def test_update_params_applies_from_the_next_token(tiny, prompt):
    scheduler = Scheduler(tiny)
    # A fixed seed: with a random one the sampled part may draw EOS early (about 1 in 50).
    rid = scheduler.insert(prompt, SamplingParams(max_tokens=10, seed=5))
    events = []
    while len(tokens_of(events, rid)) < 4:
        events += scheduler.step()
    changed = SAMPLED.with_changes(max_tokens=10, seed=None)
    scheduler.update_params(rid, changed)
    events += run(scheduler)
    steps = [e for e in events if isinstance(e, TokenStep)]
    assert all(s.params.greedy for s in steps[:4])
    assert all(s.params.temperature == 1.0 and s.params.top_p == 0.95 for s in steps[4:])
    assert len(steps) == 10
    assert steps[4].params.seed == steps[0].params.seed == 5  # seed None keeps the request's own


def test_cancel(tiny, prompt):
    scheduler = Scheduler(tiny)
    a = scheduler.insert(prompt, SamplingParams(max_tokens=50))
    b = scheduler.insert(prompt, SamplingParams(max_tokens=6))
    events = scheduler.step() + scheduler.step() + scheduler.step()
    scheduler.cancel(a)
    after = run(scheduler)
    assert finished_of(after, a).finish_reason == "cancelled"
    assert not tokens_of(after, a)
    assert finished_of(after, b).finish_reason == "length"
    with pytest.raises(EngineError):
        scheduler.cancel(a)
    assert tokens_of(events, a)


def test_branch_continues_from_the_forced_token(tiny, prompt):
    greedy = SamplingParams(max_tokens=10, top_logprobs=2)
    original, _, _ = alone(tiny, prompt, greedy)
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, greedy)
    events = []
    while len(tokens_of(events, rid)) < 6:
        events += scheduler.step()
    forced = (original[3] + 1) % 200
    branch = scheduler.branch(rid, 3, forced)
    events += run(scheduler)
    assert finished_of(events, rid).finish_reason == "cancelled"
    steps = [e for e in events if isinstance(e, TokenStep) and e.request_id == branch]
    assert steps[0].index == 3 and steps[0].forced and steps[0].token_id == forced
    assert [s.index for s in steps] == list(range(3, 10))
    cold, _, _ = alone(tiny, prompt + original[:3] + [forced], greedy.with_changes(max_tokens=6))
    assert [s.token_id for s in steps[1:]] == cold
    # Branch from a finished request, then from the branch itself.
    again = scheduler.branch(rid, 1, original[1])
    events = run(scheduler)
    assert tokens_of(events, again) == original[1:]
    nested = scheduler.branch(branch, 5, steps[2].token_id)
    assert tokens_of(run(scheduler), nested) == [s.token_id for s in steps[2:]]


def test_prefix_reuse_prefills_only_new_tokens_and_matches_cold(tiny, prompt):
    params = SamplingParams(max_tokens=8)
    scheduler = Scheduler(tiny)
    first = scheduler.insert(prompt, params)
    events = run(scheduler)
    reply = tokens_of(events, first)
    turn = prompt + reply + tiny.tokenizer.encode(" and then")
    second = scheduler.insert(turn, params)
    events = run(scheduler)
    done = finished_of(events, second)
    cached = len(prompt) + len(reply) - 1  # the last sampled token was never fed
    assert done.prefilled_tokens == len(turn) - cached
    cold_tokens, cold_done, _ = alone(tiny, turn, params)
    assert tokens_of(events, second) == cold_tokens
    assert cold_done.prefilled_tokens == len(turn)
    warm = [e for e in events if isinstance(e, TokenStep)]
    _, _, cold_events = alone(tiny, turn, params)
    cold = [e for e in cold_events if isinstance(e, TokenStep)]
    np.testing.assert_allclose([s.logprob for s in warm], [s.logprob for s in cold], atol=1e-4)


def test_stop_string_is_not_emitted(tiny, prompt):
    params = SamplingParams(max_tokens=20, logit_bias=letters_bias(tiny))
    _, free, _ = alone(tiny, prompt, params)
    text = free.text
    stop = text[5:8]
    first = text.find(stop)
    tokens, done, events = alone(tiny, prompt, params.with_changes(stop=(stop, "zzzzzz")))
    assert done.finish_reason == "stop" and done.stop == stop
    assert done.text == text[:first]
    streamed = "".join(e.text for e in events if isinstance(e, TokenStep))
    assert streamed == text[:first]


def test_eos_and_length_finish(tiny, prompt):
    (eos,) = tiny.eos_token_ids
    tokens, done, _ = alone(tiny, prompt, SamplingParams(logit_bias={eos: 100.0}))
    assert tokens == [eos] and done.finish_reason == "stop"
    tokens, done, _ = alone(tiny, prompt, SamplingParams(max_tokens=3))
    assert len(tokens) == 3 and done.finish_reason == "length"
    short = dataclasses.replace(tiny, context_length=len(prompt) + 4)
    tokens, done, _ = alone(short, prompt, SamplingParams(max_tokens=100))
    assert len(tokens) == 4 and done.finish_reason == "length"


REJECTED = [
    ("empty prompt", lambda s, p: s.insert([], SamplingParams())),
    ("negative id", lambda s, p: s.insert([1, -1], SamplingParams())),
    ("id beyond vocab", lambda s, p: s.insert([1, 10**9], SamplingParams())),
    ("id == vocab", lambda s, p: s.insert([s.vocab_size], SamplingParams())),
    ("float id", lambda s, p: s.insert([1, 2.5], SamplingParams())),
    ("string prompt", lambda s, p: s.insert("hello", SamplingParams())),
    ("too long", lambda s, p: s.insert([1] * s.context_length, SamplingParams())),
    ("bad params type", lambda s, p: s.insert(p, {"temperature": 1.0})),
    ("bias id beyond vocab", lambda s, p: s.insert(p, SamplingParams(logit_bias={10**6: 1.0}))),
    ("cancel unknown", lambda s, p: s.cancel(99)),
    ("update unknown", lambda s, p: s.update_params(99, SamplingParams())),
    ("update bad bias", lambda s, p: s.update_params(0, SamplingParams(logit_bias={10**6: 1.0}))),
    ("branch unknown", lambda s, p: s.branch(99, 0, 1)),
    ("branch before output", lambda s, p: s.branch(0, -1, 1)),
    ("branch past output", lambda s, p: s.branch(0, 50, 1)),
    ("branch bad token", lambda s, p: s.branch(0, 0, s.vocab_size)),
]


@pytest.mark.parametrize(("name", "call"), REJECTED, ids=[r[0] for r in REJECTED])
def test_rejected_calls_change_nothing(tiny, prompt, name, call):
    params = SamplingParams(max_tokens=6, temperature=0.9, seed=5)
    expected_other, _, _ = alone(tiny, prompt, params)
    scheduler = Scheduler(tiny)
    first = scheduler.insert(prompt[:4], SamplingParams(max_tokens=3))
    scheduler.step()
    state = (list(scheduler.queue.waiting), list(scheduler._active), scheduler.queue.next_id)
    with pytest.raises((EngineError, SamplingParamsError)):
        call(scheduler, prompt)
    assert (list(scheduler.queue.waiting), list(scheduler._active), scheduler.queue.next_id) == state
    run(scheduler)
    rid = scheduler.insert(prompt, params)
    assert rid == first + 1  # no id leaked
    scheduler.prefix_store.clear()
    assert tokens_of(run(scheduler), rid) == expected_other


def test_bad_scheduler_sizes(tiny):
    for kwargs in ({"max_batch_size": 0}, {"prefill_chunk": -1}, {"prefill_chunk": 1.5}):
        with pytest.raises(EngineError):
            Scheduler(tiny, **kwargs)


def test_global_rng_untouched(tiny, prompt):
    import mlx.core as mx

    mx.random.seed(123)
    expected = mx.random.uniform(shape=(3,)).tolist()
    mx.random.seed(123)
    alone(tiny, prompt, SAMPLED.with_changes(seed=None))
    assert mx.random.uniform(shape=(3,)).tolist() == expected


def test_continue_output_equals_branch(tiny, prompt):
    greedy = SamplingParams(max_tokens=8)
    original, _, _ = alone(tiny, prompt, greedy)
    forced = (original[2] + 7) % 200
    scheduler = Scheduler(tiny)
    rid = scheduler.continue_output(prompt, original[:2], forced, greedy)
    events = run(scheduler)
    steps = [e for e in events if isinstance(e, TokenStep) and e.request_id == rid]
    assert steps[0].index == 2 and steps[0].forced and steps[0].token_id == forced
    cold, _, _ = alone(tiny, prompt + original[:2] + [forced], greedy.with_changes(max_tokens=5))
    assert [s.token_id for s in steps[1:]] == cold
    text = tiny.tokenizer.decode(original[:2] + [s.token_id for s in steps])
    assert finished_of(events, rid).text == text
    with pytest.raises(EngineError):
        scheduler.continue_output(prompt, [tiny.vocab_size], 1, greedy)
    with pytest.raises(EngineError):
        scheduler.continue_output(prompt, [], -1, greedy)
    assert not scheduler.has_work()


def scripted_run(tiny, prompt, sample_ahead: bool):
    """Joins, a cancel, a live parameter change and an EOS finish, step by step."""
    (eos,) = tiny.eos_token_ids
    scheduler = Scheduler(tiny, sample_ahead=sample_ahead, prefill_chunk=5)
    a = scheduler.insert(prompt, SAMPLED.with_changes(max_tokens=20))
    b = scheduler.insert(prompt[:5], SamplingParams(max_tokens=14, top_logprobs=4))
    events = []
    for step in range(40):
        if step == 6:
            c = scheduler.insert(prompt[3:], SAMPLED.with_changes(seed=3, max_tokens=9, logit_bias={eos: 4.0}))
        if step == 8:
            scheduler.update_params(a, SAMPLED.with_changes(max_tokens=20, temperature=0.3, top_k=3))
        if step == 10:
            scheduler.cancel(b)
        events += scheduler.step()
    events += run(scheduler)
    return [
        (
            type(e).__name__,
            e.request_id,
            getattr(e, "token_id", None),
            getattr(e, "logprob", None),
            getattr(e, "finish_reason", None),
        )
        for e in events
        if not isinstance(e, PrefillProgress)
    ], c


def test_sampling_ahead_changes_nothing(tiny, prompt):
    plain, c = scripted_run(tiny, prompt, sample_ahead=False)
    ahead, _ = scripted_run(tiny, prompt, sample_ahead=True)
    assert ahead == plain
    assert any(kind == "Finished" and rid == c for kind, rid, *_ in plain)


def pipelined_run(tiny, prompt, sample_ahead: bool, monkeypatch) -> tuple[list, int]:
    """Penalties over a short window (their counts taken on the device ahead), a stop
    string, a live change, a cancel, a join and a row whose chain holds DRY (its repeats
    keyed before the token, finished on the device ahead): every event whole, and how many
    steps were sampled ahead."""
    taken = []
    original = Scheduler._sample

    def spy(self, requests, logits, sampling, sample_ahead=False, ahead=None):
        taken.append(ahead is not None)
        return original(self, requests, logits, sampling, sample_ahead, ahead)

    monkeypatch.setattr(Scheduler, "_sample", spy)
    window = SAMPLED.with_changes(presence_penalty=0.5, frequency_penalty=0.3, penalty_window=3, max_tokens=18)
    scheduler = Scheduler(tiny, sample_ahead=sample_ahead, prefill_chunk=64)
    a = scheduler.insert(prompt, window)
    b = scheduler.insert(prompt[:4], window.with_changes(seed=5, stop=("ab",), top_logprobs=6))
    events = []
    for step in range(60):
        if step == 5:
            scheduler.update_params(a, window.with_changes(temperature=0.5, penalty_window=2))
        if step == 7:
            dry = window.with_changes(seed=9, dry_multiplier=0.8, dry_allowed_length=1, max_tokens=16)
            scheduler.insert(prompt[2:], dry)
        if step == 12 and b in scheduler.request_ids():
            scheduler.cancel(b)
        events += scheduler.step()
    events += run(scheduler)
    # Every field but the wall-clock ones: the same numbers to the bit.
    keep = [e for e in events if not isinstance(e, PrefillProgress)]
    untimed = [
        dataclasses.replace(e, prompt_tps=0.0, generation_tps=0.0) if isinstance(e, Finished) else e for e in keep
    ]
    return untimed, sum(taken)


def test_a_step_sampled_ahead_is_the_step_sampled_in_turn(tiny, prompt, monkeypatch):
    """The next step's sampling queued before this one is read back (penalty counts taken on
    the device) reports exactly what sampling it in turn reports; a live change, a join, a
    cancel and a stop discard only what was sampled ahead."""
    plain, _ = pipelined_run(tiny, prompt, False, monkeypatch)
    ahead, taken = pipelined_run(tiny, prompt, True, monkeypatch)
    assert ahead == plain
    tokens = sum(isinstance(e, TokenStep) for e in plain)
    assert tokens > 40 and taken >= 12, taken  # 18 of 25 steps; 4 when a DRY row was sampled in turn
