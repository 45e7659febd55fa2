"""Inspection data: f16/bf16 against f32, every top_logprobs, candidate sets."""

import math

import mlx.core as mx
import numpy as np
import pytest

from engine.api.params import SamplingParams
from engine.sampling.inspection import layout_of, pack_step
from engine.sampling.unpack import to_host, unpack_row
from engine.specs import row_chain
from tests.support.chain_util import run

V = 3000


def _no_history(token: int) -> int:
    return 0  # these rows have no history: every candidate's count is 0


def inspect(logits, params, top_n, bias=None):
    result = run(logits, params, bias=bias)
    packed = to_host(pack_step(result, top_n))
    assert packed.dtype == np.float32
    layout = layout_of(result, top_n)
    return [unpack_row(packed[i], layout, p.top_logprobs, row_chain(p), str, _no_history) for i, p in enumerate(params)]


@pytest.mark.parametrize(("dtype", "tolerance"), [(mx.float16, 0.03), (mx.bfloat16, 0.1)])
def test_half_precision_matches_f32(dtype, tolerance):
    rng = np.random.default_rng(0)
    base = rng.normal(0, 4, size=(2, V)).astype(np.float32)
    params = [SamplingParams(top_logprobs=20), SamplingParams(top_logprobs=20, top_k=50)]
    ref = inspect(mx.array(base), params, 20)
    low = inspect(mx.array(base).astype(dtype), params, 20)
    for r, lo in zip(ref, low, strict=True):
        assert lo.token_id == r.token_id
        assert abs(lo.logprob - r.logprob) < tolerance
        assert abs(lo.raw_logprob - r.raw_logprob) < tolerance
        ref_top = sorted(c.raw_logit for c in r.top)[-10:]
        low_top = sorted(c.raw_logit for c in lo.top)[-10:]
        np.testing.assert_allclose(low_top, ref_top, atol=tolerance * 4, rtol=tolerance / 10)
        ref_lp = sorted(c.raw_logprob for c in r.top)[-10:]
        low_lp = sorted(c.raw_logprob for c in lo.top)[-10:]
        np.testing.assert_allclose(low_lp, ref_lp, atol=tolerance)


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_every_top_logprobs_value(dtype):
    rng = np.random.default_rng(1)
    logits = mx.array(rng.normal(0, 2, size=(1, 150)).astype(np.float32)).astype(dtype)
    for n in range(0, 101):
        params = [SamplingParams(top_logprobs=n, temperature=0.8, top_k=30)]
        (row,) = inspect(logits, params, n)
        ids = [c.token_id for c in row.top]
        assert len(ids) == len(set(ids))
        assert row.token_id in ids
        assert len(ids) <= 2 * n + 1
        finite = [c for c in row.top if math.isfinite(c.logprob)]
        assert len(finite) >= min(n, 30)


def test_candidate_values_are_consistent():
    logits = mx.array(np.log(np.array([[0.5, 0.3, 0.15, 0.05]], np.float32)))
    (row,) = inspect(logits, [SamplingParams(top_logprobs=4, top_p=0.6, temperature=1.0)], 4)
    by_id = {c.token_id: c for c in row.top}
    assert set(by_id) == {0, 1, 2, 3}
    assert by_id[0].raw_logprob == pytest.approx(math.log(0.5), abs=1e-6)
    assert by_id[0].logprob == pytest.approx(math.log(0.5 / 0.8), abs=1e-6)
    assert by_id[3].logprob == -math.inf
    assert row.entropy_raw == pytest.approx(-sum(p * math.log(p) for p in (0.5, 0.3, 0.15, 0.05)), abs=1e-5)
    assert row.entropy == pytest.approx(-(0.625 * math.log(0.625) + 0.375 * math.log(0.375)), abs=1e-5)


def test_every_stage_is_recorded_with_its_survivors_and_removal():
    probs = np.array([0.45, 0.3, 0.15, 0.06, 0.04], np.float32)
    logits = mx.array(np.log(probs)[None])
    params = SamplingParams(top_logprobs=5, temperature=1.0, top_k=4, top_p=0.8, samplers=("top_k", "top_p"))
    (row,) = inspect(logits, [params], 5)
    assert row.chain == ("raw", "top_k", "top_p")
    # top_k keeps 4 (mass 0.96); top_p 0.8 then keeps 3: the mass before token 2 is 0.78 < 0.8.
    assert row.survivors == (5, 4, 3)
    by_id = {c.token_id: c for c in row.top}
    assert by_id[4].removed_by == "top_k" and by_id[4].logprobs[1:] == (-math.inf, -math.inf)
    assert by_id[3].removed_by == "top_p"
    assert by_id[3].logprobs[1] == pytest.approx(math.log(0.06 / 0.96), abs=1e-6)
    assert by_id[2].removed_by is None
    assert by_id[0].logprobs[2] == pytest.approx(math.log(0.45 / 0.9), abs=1e-6)
    p4 = probs[:4] / probs[:4].sum()
    assert row.entropies[1] == pytest.approx(-(p4 * np.log(p4)).sum(), abs=1e-5)
    # The reverse order: top_p first keeps {0, 1, 2} (mass before token 3 is 0.9), top_k 4 keeps them.
    (rev,) = inspect(logits, [params.with_changes(samplers=("top_p", "top_k"))], 5)
    assert rev.chain == ("raw", "top_p", "top_k") and rev.survivors == (5, 3, 3)
    assert {c.token_id: c.removed_by for c in rev.top}[4] == "top_p"


DEFAULT_DEVICE = mx.default_device()


@pytest.mark.parametrize(
    "device", [mx.cpu, DEFAULT_DEVICE], ids=["cpu", f"default_device_is_{DEFAULT_DEVICE.type.name}"]
)
def test_exp_is_float32_accurate_on_the_device(device):
    """The pack's ``exp`` (a power of two on the CPU backend) against NumPy's float64 exp: the
    relative error of float32 arithmetic, growing with |x| as the exponent's rounding does
    (``mx.exp`` itself is at 1.5e-6). The second case is the default device, named by its
    kind: on a machine without a GPU it is the CPU case again (``default_device_is_cpu``)."""
    from engine.stages.base import exp

    values = np.concatenate([np.linspace(-104, 0, 50_000), [-np.inf, 0.0, 30.0]]).astype(np.float32)
    with mx.stream(device):
        got = np.array(exp(mx.array(values))).astype(np.float64)
    want = np.exp(values.astype(np.float64))
    normal = want > np.finfo(np.float32).tiny
    error = np.abs(got[normal] - want[normal]) / want[normal]
    assert np.all(error <= 2e-6 + 1.2e-7 * np.abs(values[normal])), error.max()
    assert got[-3] == 0.0 and got[-2] == 1.0


def test_statistics_over_a_real_vocabulary_match_float64():
    """log Z, entropy and logprobs of a 49,152-token step (raw and a banned token) against
    NumPy in float64, within 1e-5 nats (a float32 sum in one pass was 1.2e-4 off: the tail's
    tiny probabilities lost against the top token's 1.0)."""
    rng = np.random.default_rng(7)
    base = (rng.standard_normal((2, 49_152)) * 3).astype(np.float32)
    base[:, 11] += 25.0  # a peaked distribution: most of the mass on one token
    params = [SamplingParams(top_logprobs=10, logit_bias={11: -100.0}), SamplingParams(top_logprobs=10)]
    bias = np.zeros_like(base)
    bias[0, 11] = -100.0
    rows = inspect(mx.array(base), params, 10, bias=mx.array(bias))
    for row, logits, p in zip(rows, base, params, strict=True):
        _check_against_float64(row, logits, p.logit_bias)


def _check_against_float64(row, logits: np.ndarray, bias, entropy_atol: float = 1e-5) -> None:
    """``row``'s raw distribution, and where ``bias`` is set the biased one, against NumPy
    in float64: the entropies within ``entropy_atol``, every candidate's logprob within 1e-5."""
    chain = [logits.astype(np.float64)]
    if bias:
        chain.append(chain[0].copy())
        for token, value in bias.items():
            chain[1][token] += value
    for k, dist in enumerate(chain):
        finite = dist[np.isfinite(dist)]
        log_z = np.log(np.exp(finite - finite.max()).sum()) + finite.max()
        probs = np.exp(finite - log_z)
        assert row.entropies[k] == pytest.approx(-(probs * (finite - log_z)).sum(), abs=entropy_atol)
        for c in row.top:
            want = dist[c.token_id] - log_z
            assert c.logprobs[k] == (-math.inf if want == -np.inf else pytest.approx(want, abs=1e-5))


def test_the_bias_statistics_derived_from_raws_match_float64_and_a_step_too_far_under_is_packed_whole():
    """On a CPU the bias's distribution takes its sums from raw's exponentials times
    exp(bias - its largest) (``engine.sampling.inspection``: an exp over the vocabulary
    fewer). Its logprobs and entropy match NumPy's float64 within 1e-5 nats for bans of
    the best token, a +100 that forces an unlikely one, a bias on every token, and a ban
    of a token 95 nats over all others, whose derived Z (under float32's range) the host
    finds untrusted: that step is packed again whole."""
    from engine.sampling.batch import SamplingBatch
    from engine.sampling.inspection import UNTRUSTED_Z
    from engine.stages.base import cpu_forms
    from engine.stages.vocabulary import Vocabulary

    vocab = 4_096
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((5, vocab)) * 4).astype(np.float32)
    logits[1, 17] = 30.0
    logits[4] = -60.0
    logits[4, 5], logits[4, 9] = 40.0, -55.0  # 95 nats over every other token
    biases = [
        {3: -100.0, 7: 5.0},
        {17: -100.0},
        {int(np.argmin(logits[2])): 100.0},
        {t: -3.0 - t % 7 for t in range(vocab)},
        {5: -100.0},
    ]
    for rows in ([0, 1, 2, 3], [4]):  # the trusted ones, then the one packed again whole
        batch = None
        for r in rows:
            one = SamplingBatch.of(Vocabulary(vocab), SamplingParams(top_logprobs=8, logit_bias=biases[r]), [])
            batch = one if batch is None else (batch.extend(one) or batch)
        sampled = batch.sample(mx.array(logits[rows]), [0] * len(rows))
        assert cpu_forms() and sampled.whole is not None  # derived on this CPU
        host = to_host(sampled.packed)
        layout = sampled.places[0][1]
        z = host.reshape(len(rows), layout.width)[:, layout.bias_z]
        assert (z >= UNTRUSTED_Z).all() if len(rows) > 1 else (z < UNTRUSTED_Z).all()
        assert (sampled.trusted(host) is host) == (len(rows) > 1)
        for row, r in zip(sampled.unpack_all(host, [8] * len(rows), str, batch.counters()), rows, strict=True):
            assert row.chain[:2] == ("raw", "bias")
            _check_against_float64(row, logits[r], biases[r])


def test_a_trusted_derived_bias_entropy_keeps_float32s_accuracy_far_under_its_shift():
    """The bias's derived distribution is over a shift up to some 60 nats over its own max
    (a ban of a token that led the rest by that much): its weighted sum is taken over its
    own max, so the entropy keeps float32's accuracy (over the shift, the sum's rounding
    grew with the distance: 5.6e-4 nats here). A vocabulary that is not a multiple of 128
    is summed in one pass, where that rounding is largest."""
    from engine.sampling.batch import SamplingBatch
    from engine.sampling.inspection import UNTRUSTED_Z
    from engine.stages.vocabulary import Vocabulary

    vocab = 50_257
    for gap in (45.0, 55.0):  # over the shift, 4.3e-4 and 5.6e-4 nats off; over the max, 5e-6
        rng = np.random.default_rng(vocab + int(gap))
        logits = (rng.standard_normal(vocab) * 0.5).astype(np.float32)
        best = int(rng.integers(vocab))
        logits[best] = logits.max() + gap
        bias = {best: -100.0}
        batch = SamplingBatch.of(Vocabulary(vocab), SamplingParams(top_logprobs=3, logit_bias=bias), [])
        sampled = batch.sample(mx.array(logits[None]), [0])
        host = to_host(sampled.packed)
        assert host[sampled.places[0][1].bias_z] >= UNTRUSTED_Z  # derived and trusted
        (row,) = sampled.unpack_all(host, [3], str, batch.counters())
        _check_against_float64(row, logits, bias, entropy_atol=5e-5)
