"""fork / fork_from: one prefill, N settings; each variant equals its solo run; the
Jensen–Shannon divergences and first differences against NumPy; validation; cancels."""

import math

import mlx.core as mx
import numpy as np
import pytest

from engine.api.errors import EngineError
from engine.api.events import Divergence, Finished, TokenStep
from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams
from engine.models.load import load
from engine.runtime.scheduler import Scheduler
from engine.sampling.divergence import js_divergence
from tests.support.tiny_archs import write_tiny_arch

VARIANTS = [
    SamplingParams(max_tokens=10),
    SamplingParams(temperature=1.0, top_p=0.9, seed=3, max_tokens=10),
    SamplingParams(temperature=0.7, top_k=8, seed=4, max_tokens=6, samplers=LLAMA_CPP_SAMPLERS),
    SamplingParams(temperature=1.2, seed=5, max_tokens=10, dry_multiplier=1.0, xtc_probability=1.0, xtc_threshold=0.01),
]


def run(scheduler):
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def tokens(events, rid):
    return [e.token_id for e in events if isinstance(e, TokenStep) and e.request_id == rid]


def finished(events, rid):
    return next(e for e in events if isinstance(e, Finished) and e.request_id == rid)


def solo(loaded, prompt, params):
    scheduler = Scheduler(loaded)
    rid = scheduler.insert(prompt, params)
    return tokens(run(scheduler), rid)


def numpy_js(a, b):
    def probs(x):
        x = np.asarray(x, np.float64)
        e = np.exp(x - x[np.isfinite(x)].max())
        e[~np.isfinite(x)] = 0.0
        return e / e.sum()

    p, q = probs(a), probs(b)
    m = 0.5 * (p + q)
    kl = lambda u: sum(ui * math.log(ui / mi) for ui, mi in zip(u, m, strict=True) if ui > 0)  # noqa: E731
    return 0.5 * (kl(p) + kl(q))


@pytest.fixture
def prompt(tiny):
    return tiny.tokenizer.encode("the cat sat on the mat")


def test_each_variant_equals_its_solo_run_and_the_prompt_is_prefilled_once(tiny, prompt):
    scheduler = Scheduler(tiny, prefill_chunk=4)
    ids = scheduler.fork(prompt, VARIANTS)
    assert ids == [0, 1, 2, 3]
    events = run(scheduler)
    for rid, params in zip(ids, VARIANTS, strict=True):
        assert tokens(events, rid) == solo(tiny, prompt, params)
    assert [finished(events, rid).prefilled_tokens for rid in ids] == [len(prompt), 0, 0, 0]
    progress = [e for e in events if not isinstance(e, (TokenStep, Finished, Divergence))]
    assert {e.request_id for e in progress} == {0}


def test_divergence_matches_numpy_and_first_differences(tiny, prompt):
    same = SamplingParams(temperature=1.0, max_tokens=8)
    variants = [SamplingParams(max_tokens=8), same.with_changes(temperature=2.0, seed=1), same.with_changes(seed=2)]
    scheduler = Scheduler(tiny)
    ids = scheduler.fork(prompt, variants)
    events = run(scheduler)
    divergences = [e for e in events if isinstance(e, Divergence)]
    assert [d.index for d in divergences] == list(range(8))
    first = divergences[0]
    assert first.group == ids[0] and first.pairs == ((0, 1), (0, 2), (1, 2))
    raw = np.array(tiny.model(mx.array(prompt)[None])[0, -1].astype(mx.float32))
    # Greedy rows show their final distribution at T = 1: row 0 and row 2 are both softmax(raw).
    expected = [numpy_js(raw, raw / 2.0), numpy_js(raw, raw), numpy_js(raw / 2.0, raw)]
    np.testing.assert_allclose(first.js, expected, atol=2e-5)
    streams = {rid: tokens(events, rid) for rid in ids}
    last = divergences[-1]
    for (a, b), seen in zip(last.pairs, last.first_difference, strict=True):
        differ = [i for i, (x, y) in enumerate(zip(streams[a], streams[b], strict=True)) if x != y]
        assert seen == (differ[0] if differ else None)


def test_js_divergence_against_numpy_with_removed_tokens():
    rng = np.random.default_rng(0)
    a = rng.normal(0, 2, (5, 300)).astype(np.float32)
    b = rng.normal(0, 2, (5, 300)).astype(np.float32)
    a[0, :200] = -np.inf
    b[1, 100:] = -np.inf
    b[2] = a[2]
    got = np.array(js_divergence(mx.array(a), mx.array(b)))
    want = [numpy_js(x, y) for x, y in zip(a, b, strict=True)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got[2] == pytest.approx(0.0, abs=1e-6) and (got <= math.log(2) + 1e-6).all()


def test_fork_from_a_reply_continues_at_its_position(tiny, prompt):
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, SamplingParams(max_tokens=12))
    original = tokens(run(scheduler), rid)
    variants = [SamplingParams(max_tokens=12), SamplingParams(temperature=1.0, seed=9, max_tokens=12)]
    ids = scheduler.fork_from(rid, 5, variants)
    events = run(scheduler)
    steps = [e for e in events if isinstance(e, TokenStep) and e.request_id == ids[0]]
    assert steps[0].index == 5
    assert tokens(events, ids[0]) == original[5:]  # greedy continues the greedy reply
    alone = Scheduler(tiny)
    alone.insert(prompt, SamplingParams(max_tokens=12))
    run(alone)
    (solo_id,) = alone.fork_from(0, 5, variants[1:])
    assert tokens(run(alone), solo_id) == tokens(events, ids[1])  # seeded: batch-invariant
    assert finished(events, ids[0]).prefilled_tokens <= 1  # the reply's cache is reused


@pytest.mark.parametrize(
    "call",
    [
        lambda s, p: s.fork(p, []),
        lambda s, p: s.fork(p, [SamplingParams(), "hot"]),
        lambda s, p: s.fork(p, [SamplingParams()] * 17),
        lambda s, p: s.fork([], [SamplingParams()]),
        lambda s, p: s.fork(p, [SamplingParams(logit_bias={10**6: 1.0})]),
        lambda s, p: s.fork_from(99, 0, [SamplingParams()]),
    ],
)
def test_rejected_forks_change_nothing(tiny, prompt, call):
    scheduler = Scheduler(tiny)
    with pytest.raises((EngineError, ValueError)):
        call(scheduler, prompt)
    assert not scheduler.has_work() and scheduler.request_ids() == []
    assert scheduler.insert(prompt, SamplingParams(max_tokens=2)) == 0


def test_cancelling_during_the_shared_prefill(tiny, prompt):
    scheduler = Scheduler(tiny, prefill_chunk=2)
    ids = scheduler.fork(prompt, VARIANTS[:3])
    scheduler.step()  # the first chunk
    scheduler.cancel(ids[0])  # the request that prefills: the next one takes over
    scheduler.cancel(ids[2])
    events = run(scheduler)
    assert finished(events, ids[0]).finish_reason == "cancelled"
    assert finished(events, ids[2]).finish_reason == "cancelled"
    assert tokens(events, ids[1]) == solo(tiny, prompt, VARIANTS[1])
    # The cancelled request's caches held its first chunk and the one queued behind it
    # (engine.runtime.prefill): the next one reuses both.
    assert finished(events, ids[1]).prefilled_tokens == len(prompt) - 4


def test_cancelling_the_leader_while_its_last_chunk_is_queued(tiny):
    """A four-token prompt read two at a time: the first step queues the last chunk behind
    the first. The heir takes that chunk (and the prompt's last logits) over."""
    prompt = tiny.tokenizer.encode("the cat sat on the mat")[:4]
    scheduler = Scheduler(tiny, prefill_chunk=2)
    ids = scheduler.fork(prompt, VARIANTS[:2])
    scheduler.step()
    scheduler.cancel(ids[0])
    events = run(scheduler)
    assert finished(events, ids[0]).finish_reason == "cancelled"
    assert finished(events, ids[1]).finish_reason != "error"
    assert tokens(events, ids[1]) == solo(tiny, prompt, VARIANTS[1])


@pytest.mark.parametrize("arch", ["gemma3_text", "lfm2"])
def test_fork_on_sliding_window_and_recurrent_caches(arch, tmp_path):
    loaded = load(str(write_tiny_arch(tmp_path / arch, arch)))
    no_eos = {t: -100.0 for t in loaded.eos_token_ids}
    variants = [v.with_changes(max_tokens=24, logit_bias=no_eos) for v in VARIANTS[:3]]
    prompt = list(range(5, 25))
    scheduler = Scheduler(loaded)
    ids = scheduler.fork(prompt, variants)
    events = run(scheduler)
    for rid, params in zip(ids, variants, strict=True):
        assert tokens(events, rid) == solo(loaded, prompt, params)


def test_fork_output_equals_fork_from_for_a_reply_no_longer_held(tiny, prompt):
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, SamplingParams(max_tokens=10))
    original = tokens(run(scheduler), rid)
    variants = [SamplingParams(max_tokens=10), SamplingParams(temperature=1.0, seed=2, max_tokens=10)]
    held = scheduler.fork_from(rid, 4, variants)
    from_held = run(scheduler)
    fresh = Scheduler(tiny)
    ids = fresh.fork_output(prompt, original[:4], variants)
    events = run(fresh)
    for a, b in zip(held, ids, strict=True):
        assert tokens(events, b) == tokens(from_held, a)
    assert [e.index for e in events if isinstance(e, TokenStep) and e.request_id == ids[0]][0] == 4
