"""DRY ("don't repeat yourself", Weidmann 2024) penalties, kept incrementally per row.

Semantics are llama.cpp's ``llama_sampler_dry_apply``: over the last
``dry_penalty_last_n`` tokens of prompt + output, a token that would extend a repeat
of an earlier sequence of length ``L >= allowed_length`` loses
``multiplier * base ** (L - allowed_length)`` (exponent capped so the penalty stays
finite). Sequence breakers end matching: a repeat never reaches back past the most
recent breaker, and a token that contains a breaker is never penalized.

llama.cpp recomputes the repeat lengths with the Z-algorithm on every step, O(N) in
the window. Here each row keeps ``match[p]``, the length of the longest common suffix
of ``tokens[..p]`` and the whole history; appending token ``x`` updates it in one
vectorized O(N) pass (``match'[p] = match[p-1] + 1 if tokens[p] == x else 0``), and
the most recent breaker is tracked as tokens arrive.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from engine.api.params import SamplingParams

MAX_TAIL_TOKENS = 20  # llama.cpp caps a breaker's tokenized tail at 20 tokens too
FLOAT_MAX_LOG = 88.7228391


@dataclass(frozen=True)
class Breakers:
    """Sequence breakers resolved against a vocabulary (llama.cpp's
    ``get_overlapping_token_sequences``)."""

    single: frozenset[int]
    """Tokens whose text contains a breaker: they end matching and are never penalized."""
    heads: dict[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    """Tokens whose text ends with the start of a breaker, and the token tails completing it."""

    @cached_property
    def single_ids(self) -> np.ndarray:
        """``single`` as a sorted array (``np.isin`` over a row's tokens)."""
        return np.array(sorted(self.single), dtype=np.int64)

    @property
    def tail_lengths(self) -> tuple[int, ...]:
        return tuple(sorted({len(t) for tails in self.heads.values() for t in tails}))


def resolve_breakers(breakers: Sequence[str], pieces: Sequence[str], encode: Callable[[str], list[int]]) -> Breakers:
    """``pieces[t]`` is token t's text; ``encode`` tokenizes a string without special tokens."""
    single: set[int] = set()
    heads: dict[int, set[tuple[int, ...]]] = {}
    for token, word in enumerate(pieces):
        for text in breakers:
            if text in word:
                single.add(token)
                continue
            for tail_text in _overlaps(word, text):
                tail = tuple(encode(tail_text)[:MAX_TAIL_TOKENS])
                if tail:
                    heads.setdefault(token, set()).add(tail)
    return Breakers(frozenset(single), {t: tuple(sorted(v)) for t, v in heads.items()})


def _overlaps(word: str, text: str) -> list[str]:
    """The rests of ``text`` for every suffix of ``word`` that is a proper prefix of ``text``."""
    rests = []
    start = word.find(text[0])
    while start != -1:
        suffix = word[start:]
        if len(suffix) < len(text) and text.startswith(suffix):
            rests.append(text[len(suffix) :])
        start = word.find(text[0], start + 1)
    return rests


class BreakerCache:
    """Breakers resolved against one vocabulary (a scan of every token's text, as llama.cpp
    does when the sampler is made), kept for the last few sets. Call it with the strings."""

    def __init__(self, vocab_size: int, piece: Callable[[int], str], encode: Callable[[str], list[int]]) -> None:
        self._vocab_size = vocab_size
        self._piece = piece
        self._encode = encode
        self._sets: OrderedDict[tuple[str, ...], Breakers] = OrderedDict()

    def __call__(self, texts: tuple[str, ...]) -> Breakers:
        if texts not in self._sets:
            pieces = [self._piece(t) for t in range(self._vocab_size)]
            self._sets[texts] = resolve_breakers(texts, pieces, self._encode)
            while len(self._sets) > 4:
                self._sets.popitem(last=False)
        self._sets.move_to_end(texts)
        return self._sets[texts]


class DryRow:
    """One request's DRY state: its history, the suffix-match lengths and the last breaker."""

    def __init__(self, history: Sequence[int], breakers: Breakers) -> None:
        self.breakers = breakers
        self._tokens = np.zeros(max(64, 2 * len(history)), dtype=np.int64)
        self._match = np.zeros_like(self._tokens)
        self._length = 0
        self._head = -1  # position of the most recent breaker head with a complete tail
        self._head_tail = 0
        for token in history:
            self.accept(token)

    def __len__(self) -> int:
        return self._length

    def mark(self) -> tuple[int, int, int, np.ndarray]:
        """Where the row stands: its length, its last breaker and the match lengths (a copy
        of the window's; ``accept`` rewrites them all, so they cannot be recomputed back)."""
        return self._length, self._head, self._head_tail, self._match[: self._length].copy()

    def rewind(self, mark: tuple[int, int, int, np.ndarray]) -> None:
        self._length, self._head, self._head_tail, match = mark
        self._match[: self._length] = match

    def accept(self, token: int) -> None:
        """Append ``token``: O(history) vectorized, like llama.cpp's per-step pass."""
        n = self._length
        if n == len(self._tokens):
            self._tokens = np.concatenate([self._tokens, np.zeros_like(self._tokens)])
            self._match = np.concatenate([self._match, np.zeros_like(self._match)])
        tokens, match = self._tokens, self._match
        if n > 0:
            # match[p] for p < n-1 describes the history before this token; shift by one.
            previous = np.concatenate([[0], match[: n - 1]])
            match[:n] = np.where(tokens[:n] == token, previous + 1, 0)
        tokens[n] = token
        self._length = n + 1
        self._note_breaker(n)

    def _note_breaker(self, end: int) -> None:
        tokens = self._tokens
        if int(tokens[end]) in self.breakers.single:
            self._head, self._head_tail = end, 0
            return
        for length in self.breakers.tail_lengths:
            head = end - length
            if head < 0 or head < self._head:
                continue
            tails = self.breakers.heads.get(int(tokens[head]), ())
            tail = tuple(int(t) for t in tokens[head + 1 : end + 1])
            if tail in tails and (head > self._head or length > self._head_tail):
                self._head, self._head_tail = head, length

    def penalties(self, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, penalties) for the next token; empty when DRY does not act."""
        n = self._length
        window = self._window(params, n)
        if window is None:
            return _EMPTY
        start, limit = window
        positions = np.arange(start, n - 1)
        lengths = np.minimum(np.minimum(self._match[start : n - 1], positions - start + 1), limit)
        hits = lengths >= params.dry_allowed_length
        following = self._tokens[positions[hits] + 1]
        tokens, longest = _longest(following, lengths[hits])
        keep = self._not_single(tokens)
        return tokens[keep], _penalty(params, longest[keep])

    def pending(self, params: SamplingParams) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """The penalties of the token after next, before the next one (``x``) is known:
        ``(keys, tokens, penalties, completers)``. Once ``x`` is, each token of ``tokens``
        loses its penalty where its key is ``x`` (a repeat ``x`` extends), unless ``x`` is
        a breaker, or completes one in ``completers`` (the repeat then reaches back to
        nothing). What :meth:`penalties` gives after ``accept(x)``, for every ``x``
        (``tests/engine/stages/test_stage_dry.py``): the compiled step finishes it on the
        device, where a step sampled ahead has ``x`` (``engine.stages.dry``)."""
        n = self._length  # x will stand at n
        window = self._window(params, n + 1)
        if window is None:
            return (*_EMPTY_KEYED, [])
        start, limit = window
        # After x, match[p] = match[p - 1] + 1 where tokens[p] == x: the length if x is tokens[p].
        positions = np.arange(start, n)
        before = np.where(positions > 0, self._match[np.maximum(positions - 1, 0)], 0)
        lengths = np.minimum(np.minimum(before + 1, positions - start + 1), limit)
        hits = lengths >= params.dry_allowed_length
        positions, lengths = positions[hits], lengths[hits]
        keys = self._tokens[positions]
        # The token following position p: tokens[p + 1], or x itself at n - 1, where x is the key.
        following = self._tokens[np.minimum(positions + 1, n - 1)]
        # Not deduplicated: the step keeps the largest penalty of a token (a scatter's
        # maximum), the longest repeat's (the penalty grows with the length: base >= 1).
        keep = self._not_single(following)
        return keys[keep], following[keep], _penalty(params, lengths[keep]), self._completers(n, start)

    def _window(self, params: SamplingParams, n: int) -> tuple[int, int] | None:
        """(start, limit) of the repeats over a history of ``n`` tokens whose last breaker is
        this row's; None where DRY does not act."""
        allowed = params.dry_allowed_length
        last_n = n if params.dry_penalty_last_n < 0 else min(n, params.dry_penalty_last_n)
        if not params.has_dry or last_n <= allowed:
            return None
        start = n - last_n
        limit = last_n if self._head < start else (n - 1 - self._head) - self._head_tail
        return None if limit < allowed else (start, limit)

    def _completers(self, end: int, start: int) -> list[int]:
        """The tokens that, standing at ``end``, would complete a breaker (as ``_note_breaker``
        would find it) whose head is in the window (from ``start``; a head before it ends
        no repeat: ``_window``): its head earlier, the rest of its tail already in place."""
        out = set()
        for length in self.breakers.tail_lengths:
            head = end - length
            if head < max(start, 0) or head < self._head:
                continue
            placed = tuple(int(t) for t in self._tokens[head + 1 : end])
            for tail in self.breakers.heads.get(int(self._tokens[head]), ()):
                if len(tail) == length and tail[:-1] == placed and (head > self._head or length > self._head_tail):
                    out.add(tail[-1])
        return sorted(out)

    def _not_single(self, tokens: np.ndarray) -> np.ndarray:
        """Which of ``tokens`` are not breakers (a token holding a breaker is never penalized)."""
        if len(tokens) > 32:  # NumPy's set test costs tens of µs whatever the size: for many only
            return ~np.isin(tokens, self.breakers.single_ids)
        return np.array([int(t) not in self.breakers.single for t in tokens], dtype=bool)


_EMPTY = (np.zeros(0, np.int64), np.zeros(0, np.float32))
_EMPTY_KEYED = (np.zeros(0, np.int64), *_EMPTY)


def _longest(tokens: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The longest length of each distinct token, sorted by token."""
    order = np.lexsort((-lengths, tokens))  # by token, longest first
    tokens, lengths = tokens[order], lengths[order]
    first = np.concatenate([[True], tokens[1:] != tokens[:-1]])[: len(tokens)]
    return tokens[first], lengths[first]


def _penalty(params: SamplingParams, lengths: np.ndarray) -> np.ndarray:
    """``multiplier * base ** (length - allowed)``, the exponent capped as llama.cpp's; float32."""
    exponent = (lengths - params.dry_allowed_length).astype(np.float64)
    if params.dry_base > 1.000001:
        exponent = np.minimum(exponent, int(FLOAT_MAX_LOG / np.log(params.dry_base)))
    values = params.dry_multiplier * np.power(params.dry_base, exponent)
    with np.errstate(over="ignore"):  # inf past float32, as llama.cpp's penalty (see stages/dry.py)
        return values.astype(np.float32)
