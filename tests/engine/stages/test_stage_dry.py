"""DRY against a from-scratch NumPy port of llama.cpp's ``llama_sampler_dry_apply``
(``tests/support/sampling_reference.py``): breaker resolution, hand-computed cases, llama.cpp's
own cases, and the incremental per-row state compared at every step of a long,
repetitive history."""

from __future__ import annotations

import copy

import mlx.core as mx
import numpy as np
import pytest

from engine.api.params import SamplingParams
from engine.stages.base import Rows, StateContext
from engine.stages.dry import DryRows, apply_dry, dry_penalty
from engine.stages.dry_state import Breakers, DryRow, resolve_breakers
from engine.stages.vocabulary import Vocabulary
from tests.support import sampling_reference as ref

# A small fake vocabulary. "<|end|>" is a multi-token breaker: "<|", "<", "foo<|" and "x\n<" end
# with a start of it (heads), completed by the tails (end, |>), (|, end, |>), (end, |>) and
# (|, end, |>); "x\n<" also contains "\n", so it is a single-token breaker as well. "<x" is not a head.
PIECES = ["a", "b", "c", "d", "e", "f", "\n", "x\n", ":", "<|", "end", "|>", "<", "|", "foo<|", "<|end|>", "g", "h"]
PIECES += ["x\n<", "<x"]
V = len(PIECES)
BREAKERS = ("\n", ":", "<|end|>")


def encode(text: str) -> list[int]:
    """Greedy longest match over PIECES."""
    out = []
    while text:
        token = max((t for t, p in enumerate(PIECES) if text.startswith(p)), key=lambda t: len(PIECES[t]))
        out.append(token)
        text = text[len(PIECES[token]) :]
    return out


RESOLVED = resolve_breakers(BREAKERS, PIECES, encode)
PROCESSED = ref.process_breakers(BREAKERS, PIECES, encode)
# Token-level breakers (as llama.cpp's tests give them): ':' alone; "<|" completed by ": end" or
# by "end" (two tail lengths for one head); 'a' completed by ':' (a tail holding a breaker).
TOKEN_PROCESSED = {8: [()], 9: [(8, 10), (10,)], 14: [(10, 11)], 0: [(8,)]}


def as_breakers(processed) -> Breakers:
    single = frozenset(t for t, tails in processed.items() if () in tails)
    return Breakers(single, {t: tuple(sorted(x for x in tails if x)) for t, tails in processed.items() if any(tails)})


def ids(text: str) -> list[int]:
    """'a b <| end' -> token ids; pieces separated by spaces, with '\\n' spelled 'NL'."""
    return [PIECES.index(w.replace("NL", "\n")) for w in text.split()]


def dry_params(**kw) -> SamplingParams:
    return SamplingParams(**{"dry_multiplier": 1.0, "dry_base": 2.0, **kw})


def engine_dense(row: DryRow, p: SamplingParams, vocab: int = V) -> np.ndarray:
    tokens, values = row.penalties(p)
    out = np.zeros(vocab, np.float32)
    out[tokens] = values
    return out


def reference(history, p: SamplingParams, processed=PROCESSED, vocab: int = V) -> np.ndarray:
    args = (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n)
    return ref.dry_penalties(history, processed, vocab, *args)


def test_breakers_resolve_like_llama_cpp():
    assert as_breakers(PROCESSED) == RESOLVED
    assert RESOLVED.single == set(ids("NL xNL : <|end|> xNL<"))
    end, bar_end = (tuple(ids("end |>")),), (tuple(ids("| end |>")),)
    assert dict(RESOLVED.heads) == {9: end, 12: bar_end, 14: end, 18: bar_end}


# (history, parameters, expected penalties by piece); multiplier 1 and base 2 unless given.
HAND = [
    # llama.cpp's example: a b c c b c y a b c has repeat counts 0 0 3 1 0 2 0 0 0 0, so c would
    # extend a repeat of 3, b of 1, y (here g) of 2: penalty 2 ** (length - allowed).
    ("a b c c b c g a b c", {"dry_allowed_length": 1}, {"c": 4.0, "b": 1.0, "g": 2.0}),
    ("a b c c b c g a b c", {"dry_allowed_length": 2}, {"c": 2.0, "g": 1.0}),
    ("a b c c b c g a b c", {"dry_allowed_length": 3}, {"c": 1.0}),
    ("a b c c b c g a b c", {"dry_allowed_length": 4}, {}),
    ("a b c a b", {"dry_multiplier": 0.5}, {"c": 0.5}),  # length 2 = allowed: multiplier * base ** 0
    ("a b a", {"dry_allowed_length": 1}, {"b": 1.0}),
    ("a b a", {}, {}),  # length 1 < allowed 2
    ("a a", {"dry_allowed_length": 1}, {"a": 1.0}),
    ("a a", {}, {}),  # llama.cpp returns when last_n_repeat <= allowed_length
    # Single-token breakers: ':' limits a repeat to the 3 tokens after it (": a b c" would be 4).
    ("e : a b c f : a b c", {}, {"f": 2.0}),
    ("a b c : a b c :", {}, {}),  # a breaker at the end: rep_limit 0
    ("a b NL a b", {}, {}),  # "\n" follows the repeat but is never penalized
    ("a b xNL a b", {}, {}),  # nor is a token containing "\n"
    # The multi-token breaker "<|end|>": its head "<|" 4 tokens back with the tail end |> gives
    # rep_limit 4 - 2 = 2, so d extends a repeat of 2 (not 5: "<| end |> b c").
    ("a <| end |> b c d <| end |> b c", {}, {"d": 1.0}),
    ("a < | end |> b c d < | end |> b c", {}, {"d": 1.0}),
    ("a foo<| end |> b c d foo<| end |> b c", {}, {"d": 1.0}),
    ("a <| end g b c d <| end g b c", {}, {"d": 8.0}),  # tail not matched: 2 ** (5 - 2)
    ("a xNL< | end |> b c d xNL< | end |> b c", {}, {"d": 1.0}),  # the longest tail of a head wins
    ("a b <| c a b", {}, {"<|": 1.0}),  # a head is penalized like any token
    # dry_penalty_last_n: only the window is searched (and a repeat is clipped at its start).
    ("a b c d e a b", {"dry_penalty_last_n": 7}, {"c": 1.0}),
    ("a b c d e a b", {"dry_penalty_last_n": 6}, {}),
    ("a b c d e a b", {"dry_penalty_last_n": 6, "dry_allowed_length": 1}, {"c": 1.0}),
    ("a b c d e a b", {"dry_allowed_length": 1}, {"c": 2.0}),
    ("a b c d e a b", {"dry_penalty_last_n": 2}, {}),
    # The exponent cap: base 100 gives max_exponent = int(88.7228391 / ln 100) = 19, so a repeat
    # of 29 (exponent 27) costs 100 ** 19 = 1e38, not 1e54 (inf in float32).
    ("a " * 30, {"dry_base": 100.0}, {"a": 1e38}),
    ("a " * 30, {"dry_base": 100.0, "dry_multiplier": 5.0}, {"a": np.inf}),  # 5e38 overflows, as in llama.cpp
    ("a " * 30, {"dry_base": 1.0}, {"a": 1.0}),
    ("a " * 30, {"dry_base": 1.75, "dry_multiplier": 0.5}, {"a": 0.5 * 1.75**27}),  # cap 158: not reached
]


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize(("history", "kw", "expected"), HAND)
def test_dry_hand_computed(history, kw, expected):
    p = dry_params(**kw)
    dense = np.zeros(V, np.float32)
    for piece, value in expected.items():
        dense[PIECES.index(piece)] = value
    np.testing.assert_allclose(reference(ids(history), p), dense, rtol=1e-6)
    np.testing.assert_allclose(engine_dense(DryRow(ids(history), RESOLVED), p), dense, rtol=1e-6)


@pytest.mark.parametrize(
    ("history", "expected"),
    [  # with TOKEN_PROCESSED; multiplier 1, base 2, allowed length 2
        # "<| : end c d" would be a repeat of 5 before e; ':' (3 back) is the most recent breaker, so 3:
        # the head "<|" further back, whose tail ": end" completes later, does not replace it.
        ("b <| : end c d e <| : end c d", {"e": 2.0}),
        # "<| end" completes a breaker 3 back (rep_limit 3 - 1 = 2): 2 ** 0 for e.
        ("b <| end c d e <| end c d", {"e": 1.0}),
        ("b <| g c d e <| g c d", {"e": 4.0}),  # no breaker: "<| g c d", 2 ** (4 - 2)
    ],
)
def test_dry_token_level_breakers_hand_computed(history, expected):
    p = dry_params()
    dense = np.zeros(V, np.float32)
    for piece, value in expected.items():
        dense[PIECES.index(piece)] = value
    np.testing.assert_allclose(reference(ids(history), p, TOKEN_PROCESSED), dense, rtol=1e-6)
    np.testing.assert_allclose(engine_dense(DryRow(ids(history), as_breakers(TOKEN_PROCESSED)), p), dense, rtol=1e-6)


@pytest.mark.parametrize(
    ("probs", "history", "expected", "multiplier", "allowed", "last_n", "breakers"),
    [  # llama.cpp's test-sampling.cpp (base 1.1; breakers as token ids)
        ([0.25] * 4, [0, 1], [0.25] * 4, 1.0, 2, 4, ()),
        ([0.25] * 4, [0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], 1.0, 2, 5, ()),
        ([0.2] * 5, [0, 1, 3, 4, 0, 1], [0.2] * 5, 1.0, 2, 6, (3,)),
        ([0.2] * 5, [0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], 2.0, 2, 5, ()),
        ([0.2] * 5, [0, 1, 2, 3, 4, 0, 1], [0.2] * 5, 1.0, 4, 7, ()),
    ],
)
def test_dry_llama_cpp_cases(probs, history, expected, multiplier, allowed, last_n, breakers):
    p = SamplingParams(dry_multiplier=multiplier, dry_base=1.1, dry_allowed_length=allowed, dry_penalty_last_n=last_n)
    vocab = len(probs)
    penalty = engine_dense(DryRow(history, Breakers(frozenset(breakers))), p, vocab)
    np.testing.assert_allclose(penalty, reference(history, p, {b: [()] for b in breakers}, vocab), rtol=1e-6)
    logits = mx.array(np.log(np.array([probs], np.float32)))
    got = np.exp(ref.log_softmax(np.asarray(apply_dry(logits, mx.array(penalty[None])))[0]))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def repetitive_history(seed: int, length: int) -> list[int]:
    """A small alphabet, copies of earlier stretches, and breakers (whole, split or broken)."""
    rng = np.random.default_rng(seed)
    alphabet = ids("a b c d e f g h")
    specials = ["NL", "xNL", ":", "<|end|>", "<| end |>", "< | end |>", "foo<| end |>", "<| end", "<", "<| : end"]
    specials = [ids(s) for s in [*specials, "xNL< | end |>", "xNL< |", "<x"]]
    history: list[int] = []
    while len(history) < length:
        u = rng.random()
        if history and u < 0.5:
            start = int(rng.integers(len(history)))
            history += history[start : start + int(rng.integers(2, 14) if u < 0.47 else rng.integers(20, 60))]
        elif u < 0.6:
            history += specials[int(rng.integers(len(specials)))]
        else:
            history.append(alphabet[int(rng.integers(len(alphabet)))])
    return history[:length]


LONG_PARAMS = [
    dry_params(dry_multiplier=0.8, dry_base=1.75),
    dry_params(dry_allowed_length=1, dry_base=1.5, dry_penalty_last_n=16),
    dry_params(dry_allowed_length=3, dry_base=3.0, dry_penalty_last_n=64),
    dry_params(dry_allowed_length=1, dry_base=100.0, dry_multiplier=0.25),  # the cap, on long copies
]


@pytest.mark.parametrize(("seed", "processed"), [(0, PROCESSED), (1, PROCESSED), (2, TOKEN_PROCESSED)])
def test_dry_incremental_state_matches_from_scratch_at_every_step(seed, processed):
    history = repetitive_history(seed, 520)
    row = DryRow(history[:10], as_breakers(processed))  # a prompt, then one token at a time
    acted = 0
    for n in range(10, len(history) + 1):
        if n > 10:
            row.accept(history[n - 1])
        assert len(row) == n
        for p in LONG_PARAMS:
            expected = reference(history[:n], p, processed)
            np.testing.assert_allclose(engine_dense(row, p), expected, rtol=1e-6, err_msg=f"step {n}, {p}")
            acted += bool(expected.any())
    assert acted > len(LONG_PARAMS) * 100  # the history really repeats


def test_dry_row_built_from_a_history_equals_one_built_token_by_token():
    history = repetitive_history(2, 300)
    whole, stepwise = DryRow(history, RESOLVED), DryRow([], RESOLVED)
    for token in history:
        stepwise.accept(token)
    for p in LONG_PARAMS:
        np.testing.assert_array_equal(engine_dense(whole, p), engine_dense(stepwise, p))


def test_apply_dry_subtracts_per_row():
    logits = mx.array(np.array([[1.0, 2.0, -np.inf], [0.0, 0.0, 0.0]], np.float32))
    penalty = mx.array(np.array([[0.5, 0.0, 3.0], [0.0, 0.0, 0.0]], np.float32))
    np.testing.assert_array_equal(np.asarray(apply_dry(logits, penalty)), [[0.5, 2.0, -np.inf], [0.0, 0.0, 0.0]])


# --- the step sampled ahead: the repeats keyed by the token not yet known --------------------


def _device_rows(rows: list[DryRow], breakers: Breakers, params: list[SamplingParams], last: list[int] | None):
    """The dense penalties the compiled step makes from ``DryRows``' inputs: taken after
    ``advance(last)`` (a step sampled ahead, the last token on the device) or as they stand."""
    state = DryRows(StateContext(Vocabulary(V, lambda texts: breakers)), list(rows))
    if last is not None:
        state.advance(mx.array(last, dtype=mx.int32), [None] * len(rows))
    inputs = state.inputs(params, Rows(list(range(len(rows))), None), [0] * len(rows))
    return np.asarray(dry_penalty(inputs, len(rows), V))


@pytest.mark.parametrize(("seed", "processed"), [(3, PROCESSED), (4, TOKEN_PROCESSED)])
def test_the_repeats_keyed_before_the_token_are_the_penalties_after_it_for_every_token(seed, processed):
    """``DryRow.pending`` finished on the device with each possible next token equals the
    penalties after ``accept`` of that token, at every step of a repetitive history with
    whole, split and broken breakers; the inputs without ``advance`` are ``penalties``."""
    breakers = as_breakers(processed)
    history = repetitive_history(seed, 160)
    acted = completed = 0
    for n in range(1, len(history)):
        row = DryRow(history[:n], breakers)
        afters = [copy.deepcopy(row) for _ in range(V)]
        for x, after in enumerate(afters):
            after.accept(x)
        for p in LONG_PARAMS:
            ahead = _device_rows([row] * V, breakers, [p] * V, list(range(V)))
            for x, after in enumerate(afters):
                np.testing.assert_array_equal(ahead[x], engine_dense(after, p), err_msg=f"step {n}, token {x}, {p}")
            acted += int(ahead.any())
            keys, _, _, completers = row.pending(p)
            completed += bool(len(keys) and completers)
        now = _device_rows([row] * 2, breakers, LONG_PARAMS[:2], None)
        for r in range(2):
            np.testing.assert_array_equal(now[r], engine_dense(row, LONG_PARAMS[r]))
    assert acted > 100 and completed > 5, (acted, completed)  # repeats to extend, and breakers the next token completes


def test_rows_without_dry_and_with_other_breakers_share_the_step_sampled_ahead():
    history = repetitive_history(5, 120)
    mine, token_level = as_breakers(PROCESSED), as_breakers(TOKEN_PROCESSED)
    by_texts = {BREAKERS: mine, (":",): token_level}
    rows = [DryRow(history, mine), None, DryRow(history, token_level)]
    params = [dry_params(dry_sequence_breakers=BREAKERS), SamplingParams(), dry_params(dry_sequence_breakers=(":",))]
    state = DryRows(StateContext(Vocabulary(V, lambda texts: by_texts[texts])), rows)
    acted = set()
    for x in range(V):
        state.advance(mx.array([x] * 3, dtype=mx.int32), [None] * 3)
        got = np.asarray(dry_penalty(state.inputs(params, Rows([0, 1, 2], None), [0] * 3), 3, V))
        expected = [
            engine_dense(DryRow([*history, x], mine), params[0]),
            np.zeros(V, np.float32),
            engine_dense(DryRow([*history, x], token_level), params[2]),
        ]
        np.testing.assert_array_equal(got, np.stack(expected), err_msg=str(x))
        acted |= {r for r in (0, 2) if got[r].any()}
    assert acted == {0, 2}


def test_the_repeats_keyed_before_the_token_hold_for_random_breakers_and_short_windows():
    """Random single breakers and heads with tails of 1 to 4 tokens, windows down to one
    token (a breaker's head may fall before the window, where it ends no repeat), allowed
    lengths 1 to 3: for every next token the device's penalties from ``pending`` are those
    after ``accept`` of it."""
    rng = np.random.default_rng(11)
    vocab, checked = 6, 0
    for _ in range(40):
        single = frozenset(int(t) for t in rng.choice(vocab, int(rng.choice([0, 0, 1])), replace=False))
        heads: dict[int, set[tuple[int, ...]]] = {}
        for _ in range(int(rng.integers(0, 3))):
            tail = tuple(int(t) for t in rng.integers(0, vocab, int(rng.integers(1, 5))))
            heads.setdefault(int(rng.integers(vocab)), set()).add(tail)
        breakers = Breakers(single, {h: tuple(sorted(t)) for h, t in heads.items()})
        history = [int(rng.integers(3)) if rng.random() < 0.8 else int(rng.integers(vocab)) for _ in range(20)]
        state = DryRows(StateContext(Vocabulary(vocab, lambda texts, b=breakers: b)), [])
        for n in range(0, len(history) + 1, 2):
            row = DryRow(history[:n], breakers)
            afters = [copy.deepcopy(row) for _ in range(vocab)]
            for x, after in enumerate(afters):
                after.accept(x)
            for last_n in (-1, 1, 2, 3):
                for allowed in (1, 2):
                    p = dry_params(dry_allowed_length=allowed, dry_penalty_last_n=last_n)
                    state.rows = [row] * vocab
                    state.advance(mx.array(list(range(vocab)), dtype=mx.int32), [None] * vocab)
                    inputs = state.inputs([p] * vocab, Rows(list(range(vocab)), None), [0] * vocab)
                    got = np.asarray(dry_penalty(inputs, vocab, vocab))
                    expected = np.stack([engine_dense(after, p, vocab) for after in afters])
                    np.testing.assert_array_equal(got, expected, err_msg=f"{history[:n]}, {p}")
                    checked += int(expected.any(axis=1).sum())
    assert checked > 300, checked


def test_a_breaker_completed_with_its_head_before_the_window_ends_no_repeat_ahead():
    """A breaker whose head lies before the window (of two tokens) ends no repeat after the
    token that completes it: the host and llama.cpp's reference penalize the repeat, and so
    must the step sampled ahead (a completer is one only with its head in the window)."""
    head, a, b, vocab = 5, 1, 2, 8
    breakers = Breakers(frozenset(), {head: ((a, a),)})
    p = dry_params(dry_allowed_length=1, dry_penalty_last_n=2)
    history = [b, a, b, head, a]
    state = DryRows(StateContext(Vocabulary(vocab, lambda texts: breakers)), [DryRow(history, breakers)])
    state.advance(mx.array([a], dtype=mx.int32), [None])
    got = np.asarray(dry_penalty(state.inputs([p], Rows([0], None), [0]), 1, vocab))[0]
    expected = ref.dry_penalties([*history, a], {head: [(a, a)]}, vocab, 1.0, 2.0, 1, 2)
    np.testing.assert_array_equal(got, expected)
    assert got[a] == 1.0
