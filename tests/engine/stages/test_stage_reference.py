"""Every sampling stage against an independent implementation (issue 8, Correctness).

transformers' own warpers (run row by row with each row's value) where they exist, the
NumPy references of ``tests/support/sampling_reference.py`` (from llama.cpp) for the rest, on
one batch with mixed per-row settings, exact ties and removed (-inf) tokens; then small
hand-computed cases, DRY's incremental state against a from-scratch recomputation at
every step, and the whole chain through ``run_chain``.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from engine.api.params import DEFAULT_SAMPLERS, LLAMA_CPP_SAMPLERS, SamplingParams
from engine.sampling.sampler import columns, group_chain, gumbel_noise, run_chain, step_key, xtc_coin
from engine.stages.dry_state import DryRow, resolve_breakers
from engine.stages.min_p import apply_min_p
from engine.stages.penalties import apply_penalties
from engine.stages.temperature import apply_temperature
from engine.stages.top_k import apply_top_k
from engine.stages.top_n_sigma import apply_top_n_sigma
from engine.stages.top_p import apply_top_p
from engine.stages.typical_p import apply_typical_p
from engine.stages.xtc import apply_xtc
from tests.support import sampling_reference as ref
from tests.support.chain_util import dry_inputs

V = 1000
NEG_INF = float("-inf")


def col(values, dtype=np.float32) -> mx.array:
    return mx.array(np.asarray(values, dtype=dtype).reshape(-1, 1))


def random_logits(seed: int, rows: int = 6, vocab: int = V) -> np.ndarray:
    """Even rows on a 0.25 grid (exact ties everywhere, at every cut-off); odd rows
    continuous with the maximum tied four times; about 5 % of every row removed."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 2.5, (rows, vocab)).astype(np.float32)
    x[::2] = np.round(x[::2] * 4) / 4
    for r in range(1, rows, 2):
        x[r, rng.choice(vocab, 3, replace=False)] = x[r].max()
    x[rng.random((rows, vocab)) < 0.05] = NEG_INF
    return x


LOGITS = random_logits(0)


def assert_rows(got, expected, atol=1e-5) -> None:
    """Same kept set, and the log-softmax of the kept tokens within ``atol``, row by row."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape
    for r, (g, e) in enumerate(zip(got, expected, strict=True)):
        kept = np.isfinite(e)
        np.testing.assert_array_equal(np.isfinite(g), kept, err_msg=f"kept set of row {r}")
        np.testing.assert_allclose(ref.log_softmax(g)[kept], ref.log_softmax(e)[kept], atol=atol, err_msg=f"row {r}")


def hf(processor, row: np.ndarray, input_ids=()) -> np.ndarray:
    ids = torch.tensor([list(input_ids)], dtype=torch.long)
    return processor(ids, torch.from_numpy(row.astype(np.float32).copy())[None])[0].numpy()


def with_ties_kept(hf_row: np.ndarray, row: np.ndarray) -> np.ndarray:
    """HF's top-p keeps one token of a tie at the cut-off and drops its twin (sort order);
    our stages keep every token tied with the last one kept."""
    kept = np.isfinite(hf_row)
    return np.where(row >= row[kept].min(), row, NEG_INF)


# --- transformers' warpers ------------------------------------------------------------


def test_top_k_matches_transformers():
    ks = [0, 1, 5, 50, 999, 2000]
    got = apply_top_k(mx.array(LOGITS), col(ks, np.int32))
    expected = [row if k == 0 else hf(TopKLogitsWarper(k), row) for row, k in zip(LOGITS, ks, strict=True)]
    assert_rows(got, expected)
    assert np.isfinite(np.asarray(got)[1]).sum() == 4  # k = 1 keeps the maximum and its three twins


def test_top_p_matches_transformers_up_to_ties():
    ps = [1.0, 0.05, 0.3, 0.6, 0.9, 0.999]
    got = apply_top_p(mx.array(LOGITS), col(ps))
    expected = [
        row if p >= 1.0 else with_ties_kept(hf(TopPLogitsWarper(p), row), row)
        for row, p in zip(LOGITS, ps, strict=True)
    ]
    assert_rows(got, expected)


def test_min_p_matches_transformers():
    ps = [0.0, 0.01, 0.05, 0.2, 0.5, 1.0]
    got = apply_min_p(mx.array(LOGITS), col(ps))
    expected = [row if p == 0 else hf(MinPLogitsWarper(p), row) for row, p in zip(LOGITS, ps, strict=True)]
    assert_rows(got, expected)


def test_typical_p_matches_transformers():
    ps = [1.0, 0.2, 0.5, 0.8, 0.95, 0.99]
    got = apply_typical_p(mx.array(LOGITS), col(ps))
    expected = [row if p >= 1 else hf(TypicalLogitsWarper(p), row) for row, p in zip(LOGITS, ps, strict=True)]
    assert_rows(got, expected)


def test_temperature_matches_transformers_and_zero_divides_by_one():
    ts = [1.0, 0.3, 0.7, 1.5, 2.0, 0.0]
    got = apply_temperature(mx.array(LOGITS), col(ts), col([0.0] * 6), col([1.0] * 6))
    expected = [row if t == 0 else hf(TemperatureLogitsWarper(t), row) for row, t in zip(LOGITS, ts, strict=True)]
    assert_rows(got, expected)


def seen_counts(seed: int, rows: int = 6, vocab: int = V) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros((rows, vocab), np.int32)
    for r in range(rows):
        np.add.at(counts[r], rng.integers(0, vocab, 120), 1)  # some seen up to four times
    return counts


def test_repetition_penalty_matches_transformers():
    counts, reps = seen_counts(1), [1.0, 1.1, 1.5, 0.8, 2.0, 1.3]
    zeros = col([0.0] * 6)
    got = np.asarray(apply_penalties(mx.array(LOGITS), mx.array(counts), col(reps), zeros, zeros))
    for r, (row, rep) in enumerate(zip(LOGITS, reps, strict=True)):
        ids = np.repeat(np.arange(V), counts[r])  # every occurrence, as a history would list them
        expected = hf(RepetitionPenaltyLogitsProcessor(rep), row, ids)
        np.testing.assert_allclose(got[r], expected, rtol=1e-6, err_msg=f"row {r}")


def test_presence_and_frequency_match_numpy():
    counts = seen_counts(2)
    reps, pres, freqs = [1.0, 1.2, 1.0, 0.9, 1.4, 1.0], [0.0, 0.5, -1.0, 2.0, 0.3, 0.0], [0.0, 0.1, 0.4, -0.5, 1.0, 0]
    got = apply_penalties(mx.array(LOGITS), mx.array(counts), col(reps), col(pres), col(freqs))
    expected = [ref.penalties(LOGITS[r], counts[r], reps[r], pres[r], freqs[r]) for r in range(6)]
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6, atol=1e-6)


def test_top_p_and_typical_p_stop_where_the_mass_reaches_p():
    # p = .5 .25 .125 .125 are exact in float32. top_p .5: token 0 alone reaches it; .75: tokens 0, 1.
    # typical_p: H = 1.75 ln 2, surprisals 1, 2, 3, 3 ln 2, so the order by |surprisal - H| is
    # token 1 (.25 ln 2), token 0 (.75 ln 2), tokens 2, 3; mass .25, .75, .875, 1. typical_p .25 keeps
    # token 1 alone (the most likely token goes), .75 keeps tokens 1 and 0 (HF; llama.cpp's
    # "cum_sum > p" would take one more), .8 all four (2 and 3 are equally typical).
    logits = mx.array(np.log(np.tile(np.array([0.5, 0.25, 0.125, 0.125], np.float32), (3, 1))))
    kept_p = np.isfinite(np.asarray(apply_top_p(logits, col([0.5, 0.75, 0.76]))))
    np.testing.assert_array_equal(kept_p, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    kept_typical = np.isfinite(np.asarray(apply_typical_p(logits, col([0.25, 0.75, 0.8]))))
    np.testing.assert_array_equal(kept_typical, [[0, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])


def test_penalties_hand_computed():
    # llama.cpp's test-sampling.cpp: p = 0.2 each, history 0 1 2 0 0, frequency 5, presence 5:
    # token 0 (3 times) loses 3*5 + 5 = 20, tokens 1 and 2 lose 10, so p = [0, 2.3e-5, 2.3e-5, .499977, .499977].
    logits = mx.array(np.log(np.full((1, 5), 0.2, np.float32)))
    counts = mx.array(np.array([[3, 1, 1, 0, 0]], np.int32))
    got = np.exp(ref.log_softmax(np.asarray(apply_penalties(logits, counts, col([1.0]), col([5.0]), col([5.0])))[0]))
    np.testing.assert_allclose(got, [0.0, 0.000023, 0.000023, 0.499977, 0.499977], atol=1e-6)


# --- NumPy references (llama.cpp) on the same batch -----------------------------------


def test_top_n_sigma_matches_reference():
    ns = [0.0, 0.5, 1.0, 2.0, 3.0, 100.0]
    got = apply_top_n_sigma(mx.array(LOGITS), col(ns))
    assert_rows(got, [ref.top_n_sigma(row, n) for row, n in zip(LOGITS, ns, strict=True)])


def test_top_n_sigma_hand_computed():
    # [1, -1, 1, -1, -inf]: mean 0 and sigma 1 over the four finite logits (the population
    # deviation; the sample one would be 1.1547), so n = 2 puts the cut-off exactly on -1 (kept:
    # llama.cpp removes only logit < max - n*sigma) and n = 1.9 at -0.9 (-1.19 with the sample one).
    # llama.cpp's own case: p = .1 .2 .3 .4 with n = 1 keeps .3 and .4 (renormalized .428571 .571429).
    row = [1.0, -1.0, 1.0, -1.0, NEG_INF]
    logits = mx.array(np.array([row, row, [*np.log([0.1, 0.2, 0.3, 0.4]), NEG_INF]], np.float32))
    got = np.asarray(apply_top_n_sigma(logits, col([2.0, 1.9, 1.0])))
    np.testing.assert_array_equal(got[0], row)
    np.testing.assert_array_equal(got[1], [1.0, NEG_INF, 1.0, NEG_INF, NEG_INF])
    np.testing.assert_allclose(np.exp(ref.log_softmax(got[2])), [0, 0, 0.428571, 0.571429, 0], atol=1e-6)


XTC_ROWS = [  # probability, threshold, coin
    (0.0, 0.01, 0.0),  # off
    (1.0, 0.01, 0.3),  # acts
    (0.5, 0.01, 0.7),  # coin above the probability: does nothing
    (0.5, 0.02, 0.5),  # coin equal to the probability: acts (llama.cpp returns only on chance > p)
    (1.0, 0.6, 0.0),  # threshold above 0.5: never acts
    (0.9, 0.005, 0.2),  # acts, removes many
]


def test_xtc_matches_reference():
    prob, thr, coin = (list(c) for c in zip(*XTC_ROWS, strict=True))
    got = apply_xtc(mx.array(LOGITS), col(prob), col(thr), col(coin))
    expected = [ref.xtc(row, *args) for row, args in zip(LOGITS, XTC_ROWS, strict=True)]
    assert_rows(got, expected)
    removed = [np.isfinite(LOGITS[r]).sum() - np.isfinite(np.asarray(got)[r]).sum() for r in range(6)]
    assert [n > 0 for n in removed] == [False, True, False, True, False, True]


def test_xtc_hand_computed():
    # llama.cpp's cases, p = .4 .3 .2 .1, probability .99: threshold .09 leaves only .1,
    # .19 leaves .2 and .1 (2/3, 1/3), .29 leaves .3 .2 .1 (.5, 1/3, 1/6), .39 does nothing.
    # Row 5: p = .3 .3 .2 .2, threshold .2: all four reach it; both .2 are "the least likely" and stay.
    # Row 6: as row 2 but the coin .9901 > .99: nothing happens.
    base = np.log([0.4, 0.3, 0.2, 0.1])
    logits = mx.array(np.array([base] * 4 + [np.log([0.3, 0.3, 0.2, 0.2]), base], np.float32))
    thresholds = [0.09, 0.19, 0.29, 0.39, 0.2, 0.19]
    coins = [0.5, 0.5, 0.5, 0.5, 0.5, 0.9901]
    got = np.asarray(apply_xtc(logits, col([0.99] * 6), col(thresholds), col(coins)))
    probs = np.array([np.exp(ref.log_softmax(row)) for row in got])
    expected = [[0, 0, 0, 1], [0, 0, 2 / 3, 1 / 3], [0, 0.5, 1 / 3, 1 / 6], [0.4, 0.3, 0.2, 0.1]]
    expected += [[0, 0, 0.5, 0.5], [0.4, 0.3, 0.2, 0.1]]
    np.testing.assert_allclose(probs, expected, atol=1e-6)


def test_xtc_threshold_zero_keeps_the_least_likely_surviving_token():
    # Every candidate has p >= 0, so XTC keeps only the least likely one, p = e^0 / (e^2 + e^1 + e^0).
    # A removed token (-inf, p = 0) is not a candidate; it must not count as the least likely.
    logits = mx.array(np.array([[2.0, 1.0, 0.0, NEG_INF]], np.float32))
    got = np.asarray(apply_xtc(logits, col([1.0]), col([0.0]), col([0.3])))
    np.testing.assert_array_equal(got[0], ref.xtc(np.asarray(logits)[0], 1.0, 0.0, 0.3))
    np.testing.assert_array_equal(got[0], [NEG_INF, NEG_INF, 0.0, NEG_INF])


DYNATEMP_ROWS = [  # temperature, range, exponent
    (0.8, 0.5, 1.0),
    (1.0, 1.0, 2.0),
    (0.3, 0.5, 0.5),  # lo = max(0, T - range) = 0
    (1.5, 0.0, 1.0),  # range 0: plain temperature
    (0.0, 1.0, 1.0),  # greedy: the stage divides by 1 and ignores the range
    (2.0, 1.5, 0.0),  # exponent 0: always T + range
]


def test_dynamic_temperature_matches_reference():
    t, r, e = (list(c) for c in zip(*DYNATEMP_ROWS, strict=True))
    got = apply_temperature(mx.array(LOGITS), col(t), col(r), col(e))
    assert_rows(got, [ref.temp_ext(row, *args) for row, args in zip(LOGITS, DYNATEMP_ROWS, strict=True)])


def test_dynamic_temperature_hand_computed():
    # p = .5 .25 .25 (+ a removed token): H = 1.5 ln 2 = 1.039721, max entropy ln 3 = 1.098612,
    # normalized .946395; T = 1, range 1 (lo 0, hi 2), exponent 2: T' = 2 * .946395^2 = 1.791326,
    # so the logits ln .5, ln .25 become -.386947, -.773893.
    # Row 2, exponent 0: T' = hi = 2 whatever the entropy: -.346574, -.693147.
    # Row 3: T = .5, range .5 (lo 0) and p = 1, e^-200 (0 in float32): H = 0, T' = 0, floored at
    # 1e-6, so the second token lands at -2e8: a point mass (llama.cpp keeps only the argmax).
    # Row 4: one candidate (llama.cpp: size <= 1 leaves it alone): still a point mass.
    row = np.array([*np.log([0.5, 0.25, 0.25]), NEG_INF], np.float32)
    point = np.array([0.0, -200.0, NEG_INF, NEG_INF], np.float32)
    logits = mx.array(np.stack([row, row, point, np.array([3.0, NEG_INF, NEG_INF, NEG_INF], np.float32)]))
    got = np.asarray(apply_temperature(logits, col([1.0, 1.0, 0.5, 0.5]), col([1.0, 1.0, 0.5, 0.5]), col([2, 0, 1, 1])))
    np.testing.assert_allclose(got[0, :3], [-0.386947, -0.773893, -0.773893], atol=1e-5)
    np.testing.assert_allclose(got[1, :3], [-0.346574, -0.693147, -0.693147], atol=1e-5)
    assert got[2, 0] == 0.0 and got[2, 1] <= -1e8
    assert np.exp(ref.log_softmax(got[3]))[0] == 1.0


# --- the whole chain ------------------------------------------------------------------

PIECES = ["a", "b", "\n", ":", "<|", "end", "|>", *(f"t{i}" for i in range(7, V))]


def encode(text: str) -> list[int]:
    """Greedy longest match over PIECES (a stand-in tokenizer for DRY's breaker tails)."""
    out = []
    while text:
        token = max((t for t, p in enumerate(PIECES) if text.startswith(p)), key=lambda t: len(PIECES[t]))
        out.append(token)
        text = text[len(PIECES[token]) :]
    return out


DRY_BREAKERS = ("\n", ":", "<|end|>")

CHAIN_ROWS = [
    SamplingParams(temperature=0.8, top_k=50, top_p=0.9, seed=1),
    SamplingParams(min_p=0.05, repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.2, seed=2),  # greedy
    SamplingParams(temperature=1.2, typical_p=0.8, top_n_sigma=1.5, dynatemp_range=0.5, seed=3),
    SamplingParams(temperature=0.7, xtc_probability=1.0, xtc_threshold=0.02, dry_multiplier=0.8, seed=4),
    SamplingParams(temperature=1.0, seed=5, logit_bias={5: 3.0, 7: -100.0}),
    SamplingParams(temperature=0.9, top_k=200, min_p=0.02, top_n_sigma=2.0, xtc_probability=0.5, seed=6),
    SamplingParams(temperature=0.0, top_p=0.5, dry_multiplier=1.0, dry_allowed_length=1, xtc_probability=1.0, seed=7),
]  # row 6 is greedy with XTC after temperature (default order): its draw is not the argmax of the last stage


def reference_stage(name: str, row: np.ndarray, p: SamplingParams, counts, dry, coin) -> np.ndarray:
    """One stage of one row, by transformers where it has the stage, else by the NumPy references."""
    if name == "bias":
        return row + np.array([p.logit_bias.get(t, 0.0) for t in range(row.size)], np.float32)
    if name == "penalties":
        return ref.penalties(row, counts, p.repetition_penalty, p.presence_penalty, p.frequency_penalty)
    if name == "dry":
        return row - dry
    if name == "temperature":
        return ref.temp_ext(row, p.temperature, p.dynatemp_range, p.dynatemp_exponent)
    if name == "top_k":
        return row if p.top_k == 0 else hf(TopKLogitsWarper(p.top_k), row)
    if name == "top_p":
        return row if p.top_p >= 1 else with_ties_kept(hf(TopPLogitsWarper(p.top_p), row), row)
    if name == "min_p":
        return row if p.min_p == 0 else hf(MinPLogitsWarper(p.min_p), row)
    if name == "typical_p":
        return row if p.typical_p >= 1 else hf(TypicalLogitsWarper(p.typical_p), row)
    if name == "top_n_sigma":
        return ref.top_n_sigma(row, p.top_n_sigma)
    assert name == "xtc"
    return ref.xtc(row, p.xtc_probability, p.xtc_threshold, coin)


@pytest.mark.parametrize(
    "order", [DEFAULT_SAMPLERS, LLAMA_CPP_SAMPLERS, tuple(np.random.default_rng(5).permutation(DEFAULT_SAMPLERS))]
)
def test_run_chain_matches_the_references_composed_in_order(order):
    params = [p.with_changes(samplers=order) for p in CHAIN_ROWS]
    logits = random_logits(7, rows=len(params))
    rng = np.random.default_rng(8)
    repeated = [int(t) for t in rng.integers(7, 12, 30)]  # ends with a repeat of its start: DRY acts
    histories = [[*repeated, *(int(t) for t in rng.integers(0, V, 20)), *repeated[:12]] for _ in params]
    counts = np.stack(
        [np.bincount(h[-p.penalty_window :], minlength=V) for h, p in zip(histories, params, strict=True)]
    )
    # The chain is fed the engine's DRY penalties (DryRow, what the scheduler hands it); the
    # reference subtracts the NumPy port of llama.cpp's DRY (test_stage_dry.py's reference).
    breakers = resolve_breakers(DRY_BREAKERS, PIECES, encode)
    processed = ref.process_breakers(DRY_BREAKERS, PIECES, encode)
    engine_dry = np.zeros((len(params), V), np.float32)
    for r, (h, p) in enumerate(zip(histories, params, strict=True)):
        tokens, values = DryRow(h, breakers).penalties(p)
        engine_dry[r, tokens] = values
    dry = np.stack(
        [
            ref.dry_penalties(h, processed, V, p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n)
            for h, p in zip(histories, params, strict=True)
        ]
    )
    indices = [3, 0, 17, 5, 2, 9, 4]
    coins = [xtc_coin(p.seed, i) for p, i in zip(params, indices, strict=True)]
    chain = group_chain(params)
    inputs = columns(params, chain)
    inputs.update(
        bias=mx.array(np.stack([reference_stage("bias", np.zeros(V, np.float32), p, 0, 0, 0) for p in params])),
        counts=mx.array(counts.astype(np.int32)),
        **dry_inputs(engine_dry),
        xtc_coin=col(coins),
    )
    noise = gumbel_noise([step_key(p.seed, i) for p, i in zip(params, indices, strict=True)], V)
    result = run_chain(mx.array(logits), chain, inputs, noise)

    assert set(chain) == {"bias", *DEFAULT_SAMPLERS}
    expected = [logits[r].astype(np.float64) for r in range(len(params))]
    entering = list(expected)
    for i, name in enumerate(chain):
        for r, p in enumerate(params):
            if name == "temperature":
                entering[r] = expected[r]
            out = reference_stage(name, expected[r].astype(np.float32), p, counts[r], dry[r], coins[r])
            expected[r] = np.asarray(out, np.float64)
        assert_rows(result.outputs[i + 1], expected, atol=2e-5)
    for r, p in enumerate(params):
        drawn = np.argmax(entering[r]) if p.greedy else np.argmax(expected[r] + np.asarray(noise[r]))
        assert int(result.tokens[r]) == drawn, f"row {r}"
    assert dry[3].any() and dry[6].any() and coins[5] > 0.5  # the data exercise DRY, and XTC's coin both ways
    if order == DEFAULT_SAMPLERS:
        assert np.argmax(expected[6]) != int(result.tokens[6])
