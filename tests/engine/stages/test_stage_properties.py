"""Properties of the stages and the chain, by hypothesis (issue 8, Correctness): a stage
with neutral parameters is the exact identity; a removed token never comes back; every
stage leaves a distribution over the surviving tokens; a row's seeded draw depends on
neither the other rows nor the stages switched off for it; XTC's coin is a function of
seed and token index only."""

from __future__ import annotations

from functools import cache

import mlx.core as mx
import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.api.params import SAMPLER_STAGES, SamplingParams
from engine.sampling.batch import SamplingBatch
from engine.sampling.sampler import columns, draw, gumbel_noise, step_key, xtc_coin
from engine.specs import row_chain
from engine.stages import STAGES
from engine.stages.base import log_softmax
from engine.stages.dry_state import Breakers, resolve_breakers
from engine.stages.vocabulary import Vocabulary
from tests.support.chain_util import dry_inputs, fresh_state_inputs

NEG_INF = float("-inf")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

finite = st.one_of(st.sampled_from([-3.0, -1.0, 0.0, 0.5, 2.0, 5.0]), st.floats(-30, 30, width=32))


@st.composite
def logits(draw, rows=None, vocab=None) -> np.ndarray:
    """[B, V] float32 with repeated values (ties) and -inf, at least one finite per row."""
    rows = rows or draw(st.integers(1, 4))
    vocab = vocab or draw(st.integers(2, 40))
    values = draw(st.lists(st.one_of(finite, st.just(NEG_INF)), min_size=rows * vocab, max_size=rows * vocab))
    x = np.array(values, np.float32).reshape(rows, vocab)
    x[:, 0] = np.where(np.isfinite(x).any(axis=1), x[:, 0], 1.0)
    return x


@st.composite
def row_params(draw, samplers=SAMPLER_STAGES, vocab=40) -> SamplingParams:
    """Each stage on (random value) or off (its neutral value)."""

    def either(on, off):
        return draw(st.one_of(st.just(off), on))

    unit = st.floats(0.0, 1.0)
    return SamplingParams(
        temperature=either(st.sampled_from([0.0, 0.3, 0.7, 1.5]) | st.floats(0.05, 4.0), 1.0),
        dynatemp_range=either(st.floats(0.01, 2.0), 0.0),
        dynatemp_exponent=draw(st.floats(0.0, 3.0)),
        top_k=either(st.integers(1, vocab + 2), 0),
        top_p=either(st.floats(0.01, 1.0), 1.0),
        min_p=either(unit, 0.0),
        typical_p=either(st.floats(0.01, 1.0), 1.0),
        top_n_sigma=either(st.floats(0.0, 4.0), 0.0),
        xtc_probability=either(unit, 0.0),
        xtc_threshold=draw(unit),
        repetition_penalty=either(st.floats(0.5, 3.0), 1.0),
        presence_penalty=either(st.floats(-2.0, 2.0), 0.0),
        frequency_penalty=either(st.floats(-1.0, 1.0), 0.0),
        dry_multiplier=either(st.floats(0.1, 3.0), 0.0),
        dry_allowed_length=draw(st.integers(1, 3)),
        logit_bias=either(st.dictionaries(st.integers(0, vocab - 1), st.floats(-100, 100), max_size=3), {}),
        seed=draw(st.integers(0, 2**40)),
        samplers=samplers,
    )


def chain_inputs(params, chain, vocab: int, rng: np.random.Generator) -> dict[str, mx.array]:
    """Columns plus random per-row state: counts, DRY penalties and bias only where the row uses them."""
    inputs = columns(params, chain)
    b = len(params)
    counts = rng.integers(0, 3, (b, vocab)).astype(np.int32)
    dry = np.where([[p.dry_multiplier > 0] for p in params], rng.uniform(0, 3, (b, vocab)), 0.0)
    bias = np.zeros((b, vocab), np.float32)
    for r, p in enumerate(params):
        for token, value in p.logit_bias.items():
            bias[r, token] = value
    coins = rng.uniform(0, 1, (b, 1))
    inputs.update(counts=mx.array(counts), bias=mx.array(bias), **dry_inputs(dry))
    inputs.update(xtc_coin=mx.array(coins.astype(np.float32)))
    for key, value in fresh_state_inputs(params, chain, vocab).items():  # any other stage's own state
        inputs.setdefault(key, value)
    return inputs


@SETTINGS
@given(st.data())
def test_a_stage_with_neutral_parameters_is_the_exact_identity(data):
    x = data.draw(logits(vocab=data.draw(st.integers(2, 40))))
    vocab = x.shape[1]
    active = data.draw(st.lists(row_params(vocab=vocab), min_size=len(x), max_size=len(x)))
    neutral = data.draw(st.lists(st.booleans(), min_size=len(x), max_size=len(x)))
    greedy_or_not = data.draw(st.sampled_from([1.0, 0.0]))  # T = 0 divides by 1 as well
    params = [SamplingParams(temperature=greedy_or_not) if n else p for n, p in zip(neutral, active, strict=True)]
    inputs = chain_inputs(params, tuple(STAGES), vocab, np.random.default_rng(0))
    for name, stage in STAGES.items():
        out = np.asarray(stage.apply(mx.array(x), inputs))
        for r, is_neutral in enumerate(neutral):
            # The defaults leave every stage of the default order neutral; an opt-in stage
            # (no neutral value) is off by not being listed in ``samplers`` instead.
            assert stage.is_identity(params[r]) or not (is_neutral and stage.spec.default_on), (name, r)
            if stage.is_identity(params[r]):
                np.testing.assert_array_equal(out[r], x[r], err_msg=f"{name}, row {r}")


@SETTINGS
@given(st.data())
def test_removed_tokens_stay_removed_and_every_stage_is_a_distribution(data):
    order = ("bias", *data.draw(st.permutations(SAMPLER_STAGES)))
    x = data.draw(logits())
    vocab = x.shape[1]
    params = data.draw(st.lists(row_params(order[1:], vocab), min_size=len(x), max_size=len(x)))
    inputs = chain_inputs(params, order, vocab, np.random.default_rng(data.draw(st.integers(0, 99))))
    outputs, entering = [mx.array(x)], None
    for name in order:  # eagerly, one stage at a time (run_chain compiles each order: slow here)
        entering = outputs[-1] if name == "temperature" else entering
        outputs.append(STAGES[name].apply(outputs[-1], inputs))
    noise = gumbel_noise([step_key(p.seed, 0) for p in params], vocab)
    tokens = np.asarray(draw(entering, outputs[-1], inputs["greedy"], noise))
    outputs = [np.asarray(o) for o in outputs]
    for name, before, after in zip(order, outputs, outputs[1:], strict=False):
        assert not np.isnan(after).any() and not np.isposinf(after).any(), name
        assert not (np.isneginf(before) & ~np.isneginf(after)).any(), f"{name} brought back a removed token"
        assert np.isfinite(after).any(axis=1).all(), f"{name} removed every token"
        probs = np.exp(np.asarray(log_softmax(mx.array(after))))  # what the inspector shows
        # float32 logprobs carry about one ulp of the largest logit (|l| ~ 500 at T = 0.05): 3e-5.
        scale = np.abs(np.where(np.isfinite(after), after, 0)).max(axis=1)
        assert (np.abs(probs.sum(axis=1) - 1.0) <= 1e-5 + 2.5e-7 * scale).all(), name
        assert (probs[np.isneginf(after)] == 0).all(), name
    for r, p in enumerate(params):
        drawn_from = outputs[order.index("temperature") + 1] if p.greedy else outputs[-1]
        assert np.isfinite(drawn_from[r, tokens[r]]), f"row {r} drew a removed token"


PIECES = ["\n", ":", '"', "*", *(f"w{i}" for i in range(4, 40))]


@cache
def breakers(texts: tuple[str, ...]) -> Breakers:
    return resolve_breakers(texts, PIECES, lambda s: [PIECES.index(c) for c in s if c in PIECES])


def batch_of(rows, history) -> SamplingBatch:
    out = None
    for p in rows:
        one = SamplingBatch.of(Vocabulary(len(PIECES), breakers), p, history)
        out = one if out is None else (out.extend(one) or out)
    return out


def inspect(batch: SamplingBatch, sampled, row: int, p: SamplingParams):
    return sampled.unpack(np.array(sampled.packed), row, p.top_logprobs, str, batch.counter(row))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_rows_draw_depends_on_neither_the_other_rows_nor_its_switched_off_stages(data):
    vocab = len(PIECES)
    p = data.draw(row_params(vocab=vocab))
    others = data.draw(st.lists(row_params(vocab=vocab), max_size=3))
    at = data.draw(st.integers(0, len(others)))
    rows = [*others[:at], p, *others[at:]]
    x = data.draw(logits(rows=len(rows), vocab=vocab))
    history = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=30))
    indices = data.draw(st.lists(st.integers(0, 500), min_size=len(rows), max_size=len(rows)))

    one, all_rows = batch_of([p], history), batch_of(rows, history)
    alone = one.sample(mx.array(x[at : at + 1]), [indices[at]])
    together = all_rows.sample(mx.array(x), indices)
    assert int(together.tokens[at]) == int(alone.tokens[0])
    a, t = inspect(one, alone, 0, p), inspect(all_rows, together, at, p)
    assert a.chain == t.chain
    # A row's log Z is reduced over [1, V] alone and over [B, V] batched: float32 may round
    # them an ulp of the row's largest logit apart (a bias of 63 made 2.9e-6 against 0.0).
    biased = np.where(np.isfinite(x[at]), x[at], 0) + np.array([p.logit_bias.get(i, 0.0) for i in range(vocab)])
    ulps = 1e-6 + 2.5e-7 * float(np.abs(biased).max())
    np.testing.assert_allclose(a.logprobs, t.logprobs, rtol=1e-6, atol=ulps)

    only_active = p.with_changes(samplers=tuple(s for s in p.samplers if s in row_chain(p)))
    trimmed_batch = batch_of([only_active], history)
    trimmed = trimmed_batch.sample(mx.array(x[at : at + 1]), [indices[at]])
    assert int(trimmed.tokens[0]) == int(alone.tokens[0])
    trimmed_logprobs = inspect(trimmed_batch, trimmed, 0, only_active).logprobs
    np.testing.assert_allclose(trimmed_logprobs, a.logprobs, rtol=1e-6, atol=ulps)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**63 - 1), st.integers(0, 10_000), st.lists(st.integers(0, 2**63 - 1), max_size=3), st.data())
def test_xtc_coin_depends_only_on_seed_and_index_and_drives_xtc(seed, index, other_seeds, data):
    coin = xtc_coin(seed, index)
    assert 0.0 <= coin < 1.0
    for other in other_seeds:
        xtc_coin(other, index + 1)
    assert xtc_coin(seed, index) == coin
    # Through a batch: with probability .5 and two tokens above the threshold .1 (p = .14, .13; the
    # 38 others .019), XTC removes the top one exactly when this row's own coin is <= .5, and the
    # draw is the argmax of what is left plus the noise of the row's own key, wherever the row sits.
    at = data.draw(st.integers(0, len(other_seeds)))
    seeds = [*other_seeds[:at], seed, *other_seeds[at:]]
    indices = [index if r == at else data.draw(st.integers(0, 10_000)) for r in range(len(seeds))]
    vocab = len(PIECES)
    x = np.full((len(seeds), vocab), 3.0, np.float32)
    x[:, 0], x[:, 1] = 5.0, 4.9
    rows = [SamplingParams(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1, seed=s) for s in seeds]
    batch = batch_of(rows, [2])
    sampled = batch.sample(mx.array(x), indices)
    report = inspect(batch, sampled, at, rows[at])
    assert report.chain[-1] == "xtc"
    assert report.survivors[-1] == (vocab - 1 if coin <= 0.5 else vocab)
    final = np.where(np.arange(vocab) == 0, NEG_INF, x[at]) if coin <= 0.5 else x[at]
    noise = np.asarray(gumbel_noise([step_key(seed, index)], vocab))[0]
    assert int(sampled.tokens[at]) == int(np.argmax(final + noise))


def test_xtc_coin_is_uniform_and_apart_from_the_draw():
    coins = np.array([xtc_coin(7, i) for i in range(4000)])
    assert abs(coins.mean() - 0.5) < 0.02 and abs((coins < 0.25).mean() - 0.25) < 0.03
    assert len({xtc_coin(s, 0) for s in range(200)}) == 200


@given(logits(), st.lists(st.integers(0, 300), min_size=4, max_size=4), st.floats(0.05, 3.0))
@SETTINGS
def test_each_stages_cheaper_form_gives_the_general_forms_values(x, ks, temperature):
    """``Stage.forms``: top_k through a partial selection (ties and -inf included, k past
    the vocabulary) and temperature without its dynamic part equal the general ``apply``."""
    from engine.stages.temperature import apply_plain_temperature, apply_temperature
    from engine.stages.top_k import BOUND, apply_bounded_top_k, apply_top_k

    rows = x.shape[0]
    k = mx.array(np.array([min(v, BOUND) for v in ks[:rows]], np.int32).reshape(-1, 1))
    general = np.array(apply_top_k(mx.array(x), k))
    np.testing.assert_array_equal(np.array(apply_bounded_top_k(mx.array(x), k)), general)
    t = mx.array(np.array([[temperature if i % 2 else 0.0] for i in range(rows)], np.float32))
    zero = mx.zeros((rows, 1))
    plain = np.array(apply_plain_temperature(mx.array(x), t))
    np.testing.assert_array_equal(plain, np.array(apply_temperature(mx.array(x), t, zero, zero + 1.0)))
    chosen = [STAGES[name].form_for([SamplingParams(top_k=40, temperature=0.7)]) for name in ("top_k", "temperature")]
    assert chosen == ["bounded", "plain"]
    assert STAGES["top_k"].form_for([SamplingParams(top_k=40), SamplingParams(top_k=BOUND + 1)]) is None
    assert STAGES["temperature"].form_for([SamplingParams(temperature=0.7, dynatemp_range=0.3)]) is None


@st.composite
def after_top_k(draw) -> tuple[np.ndarray, np.ndarray]:
    """Logits through a top_k of at most 256 (what the bounded forms of top_p and typical_p
    receive): past 256 tokens, many tied with the k-th (a small pool of values), so the
    tail outside the 256 largest is exercised."""
    from engine.stages.top_k import BOUND, apply_bounded_top_k

    rows, vocab = draw(st.integers(1, 3)), draw(st.integers(2, 700))
    pool = draw(st.lists(finite, min_size=1, max_size=6))
    cell = st.one_of(st.sampled_from(pool), st.sampled_from(pool), finite, st.just(NEG_INF))
    x = np.array(draw(st.lists(cell, min_size=rows * vocab, max_size=rows * vocab)), np.float32).reshape(rows, vocab)
    x[:, 0] = np.where(np.isfinite(x).any(axis=1), x[:, 0], 1.0)
    k = np.array(draw(st.lists(st.integers(1, BOUND), min_size=rows, max_size=rows)), np.int32).reshape(-1, 1)
    return np.array(apply_bounded_top_k(mx.array(x), mx.array(k))), k


# Found by a random run: float32's cumulative mass crosses p = 0.99999 at the 0.5 in the
# bounded form (as float64 does) and only inside the block of zeros in the general form.
# (top_k 26 keeps all 36: its 26th value, 0.0, ties with the other zeros.)
_CROSSES_P_BETWEEN_FORMS = np.array([[5.0] * 22 + [0.0] * 11 + [0.5, 13.0, 13.468518]], np.float32)


@given(after_top_k(), st.floats(0.01, 1.0))
@example((_CROSSES_P_BETWEEN_FORMS, np.array([[26]], np.int32)), 0.99999)
@SETTINGS
def test_top_p_and_typical_p_on_what_top_k_left_equal_their_general_forms(pair, p):
    """The bounded forms read the 256 largest values and the tie tail instead of sorting the
    vocabulary; they keep the same tokens. A row may differ only where the general form
    itself changes within 1e-5 of p (the two sum the mass in another order, and float32
    cumulative sums near 1 differ by several ulps): the kept sets grow with p, so the
    bounded form's set lies between the general form's at p - 1e-5 and at p + 1e-5, and
    equals both wherever they agree."""
    from engine.stages.top_p import apply_top_p, apply_top_p_bounded
    from engine.stages.typical_p import apply_typical_p, apply_typical_p_bounded

    x, _ = pair
    column = mx.full((x.shape[0], 1), p)
    for general, bounded in ((apply_top_p, apply_top_p_bounded), (apply_typical_p, apply_typical_p_bounded)):
        fast = np.isfinite(np.array(bounded(mx.array(x), column)))
        for row in range(x.shape[0]):
            below, above = (
                np.isfinite(np.array(general(mx.array(x[row : row + 1]), mx.full((1, 1), q))))[0]
                for q in (p - 1e-5, p + 1e-5)
            )
            assert not (below & ~fast[row]).any(), (general.__name__, row, "drops a token kept below p")
            assert not (fast[row] & ~above).any(), (general.__name__, row, "keeps a token dropped above p")


def test_the_chain_with_its_forms_equals_the_chain_without_them():
    """A whole step on a real-size vocabulary: the forms the group gets change no output."""
    from engine.sampling.sampler import group_chain, group_forms, run_chain
    from tests.support.chain_util import fresh_state_inputs

    logits = mx.random.normal((3, 49_152), key=mx.random.key(5)) * 4
    every = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.02, "typical_p": 0.95, "top_n_sigma": 2.0}
    params = [SamplingParams(seed=i, **every) for i in range(3)]
    chain = group_chain(params)
    assert set(f for f in group_forms(params, chain) if f) == {"bounded", "plain"}
    inputs = columns(params, chain)
    inputs.update(fresh_state_inputs(params, chain, 49_152))
    noise = gumbel_noise([step_key(p.seed, 0) for p in params], 49_152)
    fast = run_chain(logits, chain, inputs, noise, forms=group_forms(params, chain))
    slow = run_chain(logits, chain, inputs, noise)
    for a, b in zip(fast.outputs, slow.outputs, strict=True):
        np.testing.assert_array_equal(np.isfinite(np.array(a)), np.isfinite(np.array(b)))
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-6)
    assert np.array(fast.tokens).tolist() == np.array(slow.tokens).tolist()


def test_bounded_forms_count_the_tokens_tied_past_the_256_largest():
    """500 tokens tied at the k-th value: the tail outside the 256 largest holds most of
    the mass, so a form that forgot it would keep other tokens."""
    from engine.stages.top_k import apply_bounded_top_k
    from engine.stages.top_p import apply_top_p, apply_top_p_bounded
    from engine.stages.typical_p import apply_typical_p, apply_typical_p_bounded

    x = np.full((1, 1000), -3.0, np.float32)
    x[0, :10] = np.linspace(4.0, 1.0, 10)
    x[0, 10:510] = 0.0
    kept = apply_bounded_top_k(mx.array(x), mx.array([[50]], dtype=mx.int32))
    assert int(np.isfinite(np.array(kept)).sum()) == 510
    for p in (0.05, 0.3, 0.5, 0.8, 0.95, 0.999):
        column = mx.array([[p]])
        for general, bounded in ((apply_top_p, apply_top_p_bounded), (apply_typical_p, apply_typical_p_bounded)):
            want = np.isfinite(np.array(general(kept, column)))
            np.testing.assert_array_equal(
                np.isfinite(np.array(bounded(kept, column))), want, err_msg=f"{general.__name__} {p}"
            )


def test_the_sort_a_bounded_top_k_made_carried_along_the_chain_changes_no_value():
    """``apply_chain`` carries the 256 largest values a bounded top_k sorted (and the tie
    tail) through the bounded stages after it (``Stage.viewed``), where each stage alone
    partitions and sorts again: over orders of top_p, min_p and typical_p after top_k, rows
    of many ties across the 256th value, and k on both sides of the bound, every output is
    the same to the bit."""
    from engine.sampling.sampler import group_aliases, group_chain, group_forms, run_chain

    rng = np.random.default_rng(12)
    orders = [
        ("top_p", "min_p", "typical_p"),
        ("min_p", "typical_p", "top_p"),
        ("min_p", "top_p", "typical_p"),
        ("typical_p", "top_p", "min_p"),
    ]
    carried = 0
    for case in range(96):
        samplers = ("top_k", *orders[case % len(orders)])
        logits = mx.array(rng.integers(-6, 3, (3, 700)).astype(np.float32) * rng.choice([0.5, 1.0, 3.0]))
        params = [
            SamplingParams(
                samplers=samplers,
                top_k=int(rng.choice([1, 5, 40, 256])) if case % 6 else 300,
                top_p=float(rng.choice([0.05, 0.3, 0.9, 1.0])),
                min_p=float(rng.choice([0.0, 0.05, 0.5, 0.5])),
                typical_p=float(rng.choice([0.2, 0.5, 0.9, 1.0])),
                seed=row,
            )
            for row in range(3)
        ]
        chain = group_chain(params)
        forms, aliases = group_forms(params, chain), group_aliases(params, chain)
        carried += sum(f == "bounded" for f in forms) > 1
        inputs = columns(params, chain)
        result = run_chain(logits, chain, inputs, aliases=aliases, forms=forms)
        alone = [logits]
        for name, form in zip(chain, forms, strict=True):
            x = alone[-1] if name in aliases else STAGES[name].apply_form(form)(alone[-1], inputs)
            alone.append(x)
        for a, b in zip(result.outputs, alone, strict=True):
            np.testing.assert_array_equal(np.array(a), np.array(b))
    assert carried >= 48  # cases where a view was carried to a stage after top_k
