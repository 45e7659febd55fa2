"""Each stage against hand-computed V=4 vectors, mixed batches, and the stage order."""

import math

import mlx.core as mx
import numpy as np
import pytest

from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams
from engine.sampling import sampler
from engine.specs import row_chain
from engine.stages.min_p import apply_min_p
from engine.stages.penalties import apply_penalties
from engine.stages.temperature import apply_temperature
from engine.stages.top_k import apply_top_k
from engine.stages.top_p import apply_top_p
from engine.stages.vocabulary import Vocabulary
from tests.support.chain_util import run

INF = math.inf


def col(values, dtype=mx.float32):
    return mx.array(values, dtype=dtype).reshape(-1, 1)


def test_penalties_hand_computed():
    logits = mx.array([[2.0, -1.0, 0.5, 3.0]])
    counts = mx.array([[2, 1, 0, 0]], dtype=mx.int32)
    out = apply_penalties(logits, counts, col([2.0]), col([0.5]), col([0.25]))
    # token 0: 2/2 - 0.5 - 0.25*2 = 0 ; token 1: -1*2 - 0.5 - 0.25 = -2.75
    np.testing.assert_allclose(np.array(out), [[0.0, -2.75, 0.5, 3.0]])


def test_temperature_zero_is_identity_for_the_distribution():
    logits = mx.array([[2.0, 1.0, 0.0, -1.0], [2.0, 1.0, 0.0, -1.0]])
    zero = col([0.0, 0.0])
    out = apply_temperature(logits, col([0.0, 2.0]), zero, zero + 1)
    np.testing.assert_allclose(np.array(out), [[2, 1, 0, -1], [1, 0.5, 0, -0.5]])


def test_top_k_per_row_with_off_value():
    logits = mx.array([[1.0, 4.0, 3.0, 2.0]] * 3)
    out = apply_top_k(logits, col([2, 0, 1], mx.int32))
    np.testing.assert_array_equal(
        np.array(out),
        [[-INF, 4, 3, -INF], [1, 4, 3, 2], [-INF, 4, -INF, -INF]],
    )


def test_top_p_hand_computed():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = mx.array(np.log(probs)[None].repeat(4, 0).astype(np.float32))
    out = apply_top_p(logits, col([0.5, 0.6, 0.95, 1.0]))
    kept = np.isfinite(np.array(out))
    np.testing.assert_array_equal(
        kept,
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]],
    )


def test_min_p_hand_computed():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = mx.array(np.log(probs)[None].repeat(3, 0).astype(np.float32))
    out = apply_min_p(logits, col([0.0, 0.2, 0.5]))
    kept = np.isfinite(np.array(out))
    np.testing.assert_array_equal(kept, [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]])


def pipeline(logits, params, bias=None, counts=None, noise=None):
    return run(mx.array(logits, dtype=mx.float32), params, counts=counts, bias=bias, noise=noise)


def test_temperature_applies_before_top_p():
    # At T=1 top-p 0.6 keeps {0, 1}; at T=0.25 token 0 alone reaches 0.6.
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float32))
    result = pipeline(logits, [SamplingParams(temperature=0.25, top_p=0.6)])
    assert np.isfinite(np.array(result.outputs[-1])).tolist() == [[True, False, False, False]]
    # mlx-lm's order (top-p at T=1, then temperature) would have kept token 1 too.


def test_mixed_batch_rows_are_independent():
    logits = np.log(np.array([[0.4, 0.3, 0.2, 0.1]] * 4, dtype=np.float32))
    params = [
        SamplingParams(),
        SamplingParams(temperature=1.0, top_k=2),
        SamplingParams(temperature=1.0, top_p=0.5),
        SamplingParams(temperature=1.0, min_p=0.6),
    ]
    final = np.array(pipeline(logits, params).outputs[-1])
    assert np.isfinite(final).tolist() == [
        [True] * 4,
        [True, True, False, False],
        [True, True, False, False],
        [True, True, False, False],
    ]
    # Each row alone gives the same row.
    for i, p in enumerate(params):
        alone = np.array(pipeline(logits[i : i + 1], [p]).outputs[-1])
        np.testing.assert_array_equal(alone[0], final[i])


def test_greedy_takes_argmax_of_penalized_and_final_keeps_max():
    logits = np.array([[3.0, 2.9, 0.0, -1.0]], dtype=np.float32)
    counts = mx.array([[1, 0, 0, 0]], dtype=mx.int32)
    result = pipeline(logits, [SamplingParams(repetition_penalty=2.0)], counts=counts)
    assert int(result.tokens[0]) == 1
    assert np.array(result.output("penalties"))[0, 0] == pytest.approx(1.5)


def test_bias_stage():
    logits = np.zeros((1, 4), dtype=np.float32)
    bias = mx.array([[0.0, 0.0, 5.0, 0.0]])
    result = pipeline(logits, [SamplingParams(logit_bias={2: 5.0})], bias=bias)
    assert int(result.tokens[0]) == 2
    np.testing.assert_array_equal(np.array(result.outputs[0]), logits)


def test_new_parameter_values_never_retrace():
    logits = mx.array(np.random.default_rng(0).normal(size=(3, 50)).astype(np.float32))
    counts = mx.zeros((3, 50), dtype=mx.int32)
    noise = mx.zeros((3, 50))

    def go(t, p, k, rep):
        params = [
            SamplingParams(
                temperature=t,
                top_p=p,
                top_k=k,
                repetition_penalty=rep,
                min_p=0.01,
                typical_p=p,
                top_n_sigma=k / 2,
                xtc_probability=p,
                xtc_threshold=0.1,
                dry_multiplier=rep,
                dynatemp_range=t / 2,
                logit_bias={1: rep},
            )
        ] * 3
        out = pipeline(logits, params, counts=counts, noise=noise, bias=mx.zeros((3, 50)))
        mx.eval(out.tokens)
        return out.chain

    chain = go(0.7, 0.9, 5, 1.1)
    assert len(chain) == 11 - 1  # every stage but raw
    before = sampler.TRACES["count"]
    for t, p, k, rep in [(0.8, 0.95, 6, 1.2), (1.3, 0.5, 40, 1.05), (0.1, 0.99, 2, 1.5)]:
        go(t, p, k, rep)
    assert sampler.TRACES["count"] == before


def test_draw_uses_noise_only_for_sampled_rows():
    logits = mx.array([[0.0, 1.0, 0.0, 0.0]] * 2)
    noise = mx.array([[10.0, 0.0, 0.0, 0.0]] * 2)
    tokens = pipeline(logits, [SamplingParams(), SamplingParams(temperature=1.0)], noise=noise).tokens.tolist()
    assert tokens == [1, 0]


def test_greedy_draws_the_argmax_entering_temperature_in_any_order():
    # llama.cpp's order puts temperature last: a greedy row takes the argmax after XTC.
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float32))
    params = SamplingParams(xtc_probability=1.0, xtc_threshold=0.2, samplers=LLAMA_CPP_SAMPLERS)
    assert row_chain(params) == ("xtc", "temperature")
    result = pipeline(logits, [params], noise=None)
    assert int(result.tokens[0]) == 1  # XTC removed token 0, the most likely
    default = pipeline(logits, [params.with_changes(samplers=SamplingParams().samplers)])
    assert int(default.tokens[0]) == 0  # temperature before XTC: the raw argmax


def test_a_stage_left_out_of_the_order_does_not_run():
    params = SamplingParams(temperature=1.0, top_k=1, samplers=("top_p",))
    assert row_chain(params) == ()
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float32))
    assert np.isfinite(np.array(pipeline(logits, [params]).outputs[-1])).all()


def test_rows_with_different_orders_are_sampled_in_one_batch():
    from engine.sampling.batch import SamplingBatch

    logits = mx.array(np.random.default_rng(3).normal(0, 2, size=(3, 40)).astype(np.float32))
    rows = [
        SamplingParams(temperature=0.7, top_k=5, top_p=0.8, seed=1),
        SamplingParams(temperature=0.7, top_k=5, top_p=0.8, seed=1, samplers=LLAMA_CPP_SAMPLERS),
        SamplingParams(temperature=0.0, min_p=0.1, seed=2),
    ]

    def batch_of(params):
        out = None
        for p in params:
            one = SamplingBatch.of(Vocabulary(40), p, [1, 2, 3])
            out = one if out is None else (out.extend(one) or out)
        return out

    def report(batch, sampled, row, p):
        return sampled.unpack(np.array(sampled.packed), row, p.top_logprobs, str, batch.counter(row))

    all_rows = batch_of(rows)
    together = all_rows.sample(logits, [0, 0, 0])
    assert together.chains[1] == ("top_k", "top_p", "temperature")
    for i, p in enumerate(rows):
        one = batch_of([p])
        alone = one.sample(logits[i : i + 1], [0])
        assert int(together.tokens[i]) == int(alone.tokens[0])
        assert report(all_rows, together, i, p) == report(one, alone, 0, p)


def test_xtc_threshold_zero_ignores_removed_tokens():
    # Found by the property tests: removed tokens have p = 0 >= 0 and were counted as
    # "above", so every real token was removed. All real tokens are above; the least
    # likely (here all tied) stay.
    from engine.stages.xtc import apply_xtc

    logits = np.full((1, 8), -np.inf, np.float32)
    logits[0, [0, 2, 5]] = [-1.0, -3.0, -3.0]
    out = np.array(apply_xtc(mx.array(logits), col([1.0]), col([0.0]), col([0.0])))
    assert np.isfinite(out).tolist()[0] == [False, False, True, False, False, True, False, False]


def test_the_gumbel_draw_compiled_for_a_gpu_gives_the_same_bits():
    """A GPU draws the noise compiled (one kernel after the random bits), the CPU as MLX
    writes it; compiled here too, the noise of every row is the same to the bit, and each
    row is its own key's draw (mlx's ``random.gumbel``) whatever rows are beside it."""
    keys = sampler.step_keys([3, 2**63 + 5, 0], [0, 17, 4_000])
    plain, fused = (sampler._gumbel_rows(4_099, fused)(keys) for fused in (False, True))
    np.testing.assert_array_equal(np.array(plain), np.array(fused))
    alone = mx.random.gumbel(shape=(4_099,), key=sampler.step_key(2**63 + 5, 17))
    np.testing.assert_array_equal(np.array(fused)[1], np.array(alone))


def test_a_step_traced_in_a_gpus_forms_draws_the_same_and_reports_within_float32():
    """Where no GPU is, the forms a GPU traces (plain exp and one-pass sums in the pack, the
    Gumbel draw compiled: ``engine.stages.base.gpu_forms``) still run: over mixed chains at
    a real vocabulary size they draw the same tokens and report the same candidates, their
    logprobs and entropies within float32 rounding of the CPU's forms."""
    from engine.sampling.batch import SamplingBatch
    from engine.stages.base import gpu_forms

    vocab = 49_152
    rows = [
        SamplingParams(top_logprobs=10, logit_bias={7: -5.0}, seed=0),
        SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.1, seed=1),
        SamplingParams(temperature=1.2, typical_p=0.9, top_n_sigma=2.0, xtc_probability=0.5, seed=2, top_logprobs=5),
    ]
    logits = mx.random.normal((len(rows), vocab), key=mx.random.key(11)) * 3

    def step():
        batch = None
        for p in rows:
            one = SamplingBatch.of(Vocabulary(vocab), p, [1, 2, 3, 2])
            batch = one if batch is None else (batch.extend(one) or batch)
        sampled = batch.sample(logits, [5, 5, 5])
        packed = np.array(sampled.packed)
        top_ns = [p.top_logprobs for p in rows]
        return sampled.tokens.tolist(), sampled.unpack_all(packed, top_ns, str, batch.counters())

    cpu_tokens, cpu = step()
    with gpu_forms():
        gpu_tokens, gpu = step()
    assert gpu_tokens == cpu_tokens
    # Run on this CPU, the GPU forms' one-pass sums lose up to ~1e-4 nats of log Z (why the
    # CPU's forms sum by blocks; a GPU's reduction is a tree): far inside the 0.03 allowed.
    for a, b in zip(cpu, gpu, strict=True):
        assert (a.chain, a.survivors) == (b.chain, b.survivors)
        assert [c.token_id for c in a.top] == [c.token_id for c in b.top]
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=2e-4)
        np.testing.assert_allclose(a.entropies, b.entropies, atol=2e-4)
        for x, y in zip(a.top, b.top, strict=True):
            np.testing.assert_allclose(x.logprobs, y.logprobs, atol=2e-4)


def test_a_group_of_sampled_rows_draws_as_it_does_beside_a_greedy_row():
    """Where no row of a group is greedy, the step makes no greedy draw (an argmax over the
    vocabulary and a select fewer: ``apply_chain``'s ``any_greedy``). Rows of the classic
    chain, every stage, and mirostat draw the same tokens and report the same figures
    alone as they do in a group with a greedy row, whose draw is the general one."""
    from engine.sampling.batch import SamplingBatch

    vocab = 2048
    sampled = [
        SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.1, seed=3),
        SamplingParams(
            temperature=1.1, typical_p=0.9, top_n_sigma=2.0, xtc_probability=0.5, dry_multiplier=0.8, seed=4
        ),
        SamplingParams(temperature=0.9, top_p=0.95, seed=5, top_logprobs=5),
    ]
    greedy = SamplingParams(temperature=0.0, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.1, seed=6)
    for step in range(6):
        logits = mx.random.normal((len(sampled) + 1, vocab), key=mx.random.key(step)) * 3

        def draw(params, logits=logits, step=step):
            batch = None
            for p in params:
                one = SamplingBatch.of(Vocabulary(vocab), p, [1, 2, 3, 2, 1])
                batch = one if batch is None else (batch.extend(one) or batch)
            out = batch.sample(logits[: len(params)], [step] * len(params))
            top_ns = [p.top_logprobs for p in params]
            return out.tokens.tolist(), out.unpack_all(np.array(out.packed), top_ns, str, batch.counters())

        alone_tokens, alone = draw(sampled)
        mixed_tokens, mixed = draw([*sampled, greedy])
        assert alone_tokens == mixed_tokens[: len(sampled)]
        for a, b in zip(alone, mixed, strict=False):
            assert (a.chain, a.logprobs, a.survivors) == (b.chain, b.logprobs, b.survivors)
