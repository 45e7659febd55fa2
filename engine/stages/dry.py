"""``dry``: subtract each token's DRY penalty, matched on the host from the history.

The repeats come from :mod:`engine.stages.dry_state` (llama.cpp's DRY semantics, kept
incrementally per row) as a few keyed entries a row; the stage makes the dense ``[B, V]``
penalty from them in the compiled step, with the row's last token, which a step sampled
ahead has only on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.dry import SPEC
from engine.stages.base import Accepted, Inputs, Rows, Stage, StateContext, device_constant, lane_index
from engine.stages.dry_state import DryRow

# The penalty can overflow float32 (llama.cpp caps only the exponent): a token still in the
# distribution is pushed to this floor, never to -inf, so DRY after a truncation cannot
# leave a row with no token at all.
LOWEST_LOGIT = -1e30


def apply_dry(logits: mx.array, penalty: mx.array) -> mx.array:
    """logits, penalty: [B, V] float32 (0 where a token extends no repeat)."""
    penalized = mx.maximum(logits - penalty, LOWEST_LOGIT)
    return mx.where(logits > float("-inf"), penalized, logits)


def dry_penalty(inputs: Inputs, batch: int, vocab: int) -> mx.array:
    """[B, V] float32: each row's penalties, from its keyed entries
    (``engine.stages.dry_state.DryRow.pending``) and its last token ``dry_last`` [B, 1]: an
    entry counts where its key is that token, unless the token is a breaker (``dry_breakers``
    [S, V] bool, the row's set ``dry_set`` [B, 1]) or completes one (``dry_completers``
    [B, C]). Entries already known to count (the host had the token) are keyed by 0 with a
    last token of 0 and the set that holds no breaker; padding is keyed by -1."""
    last = inputs["dry_last"]
    breaker = inputs["dry_breakers"][inputs["dry_set"], last]  # one gather of two indices
    completes = mx.any(inputs["dry_completers"] == last, axis=-1, keepdims=True)
    counted = (inputs["dry_keys"] == last) & ~(breaker | completes)
    values = mx.where(counted, inputs["dry_values"], 0.0)
    # Into a row of zeros made once (zeros made in the step would be a kernel of their own),
    # broadcast: a view, which the scatter copies.
    zeros = mx.broadcast_to(_zero_row(vocab), (batch, vocab))
    return zeros.at[lane_index(batch), inputs["dry_tokens"]].maximum(values)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_dry(logits, dry_penalty(inputs, *logits.shape))


PAD_KEY = -1


class DryRows:
    """Each row's DRY state (:class:`engine.stages.dry_state.DryRow`, on the host), None while
    DRY is off. A step's penalties travel as each row's keyed entries, a few per repeat (a
    dense [V] row each step was 196 KB a row to copy); a step sampled ahead (``advance``)
    takes them before the host has the last token, which the device then supplies."""

    def __init__(self, ctx: StateContext, rows: list[DryRow | None]) -> None:
        self.ctx = ctx
        self.rows = rows
        self.ahead: mx.array | None = None  # [B] int32: the token the step sampled ahead follows
        self._breakers: tuple[tuple[tuple[str, ...], ...], mx.array] | None = None

    def extend(self, other: DryRows) -> None:
        self.rows += other.rows
        self.ahead = None

    def filter(self, keep: Sequence[int]) -> None:
        self.rows = [self.rows[i] for i in keep]
        self.ahead = None if self.ahead is None else self.ahead[mx.array(list(keep), dtype=mx.int32)]

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        """Rebuilt from the history when DRY is switched on or its breakers change."""
        if not new.has_dry:
            self.rows[row] = None
        elif self.rows[row] is None or new.dry_sequence_breakers != old.dry_sequence_breakers:
            self.rows[row] = _row(self.ctx, new, history)

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        """O(window) per row, like llama.cpp's Z-algorithm."""
        for dry, a in zip(self.rows, accepted, strict=True):
            if dry is not None:
                dry.accept(a.token)
        self.ahead = None

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        ahead = self.ahead is not None
        entries = []
        for r in rows.rows:
            row = self.rows[r]
            if row is None:
                entries.append(_NONE)
            elif ahead:
                entries.append(row.pending(params[r]))
            else:
                tokens, values = row.penalties(params[r])
                entries.append((np.zeros_like(tokens), tokens, values, []))
        sets, breakers = self._breaker_sets(params)
        out = _entries(entries)
        if ahead:
            out["dry_last"] = rows.take(self.ahead)[:, None]
            used = [params[r].dry_sequence_breakers if self.rows[r] is not None else None for r in rows.rows]
            out["dry_set"] = mx.array(np.array([sets.index(u) + 1 if u else 0 for u in used], np.int32)[:, None])
        else:
            out["dry_last"] = out["dry_set"] = _zeros(len(rows.rows))
        out["dry_breakers"] = breakers
        return out

    def _breaker_sets(self, params: Sequence[SamplingParams]) -> tuple[tuple[tuple[str, ...], ...], mx.array]:
        """The distinct breaker sets of the rows with DRY on, and their masks ([S + 1, V]
        bool; the first holds no breaker), kept while the sets are the same."""
        on = [p.dry_sequence_breakers for p, row in zip(params, self.rows, strict=True) if row is not None]
        sets = tuple(dict.fromkeys(on))
        if self._breakers is None or self._breakers[0] != sets:
            masks = np.zeros((len(sets) + 1, self.ctx.vocab), dtype=bool)
            for i, texts in enumerate(sets, start=1):
                masks[i, self.ctx.breakers(texts).single_ids] = True
            self._breakers = (sets, mx.array(masks))
        return self._breakers

    def carry(self, row: int) -> Any:
        return None

    def mark(self) -> Any:
        return [None if row is None else row.mark() for row in self.rows], self.ahead

    def rewind(self, mark: Any) -> None:
        marks, self.ahead = mark
        for row, at in zip(self.rows, marks, strict=True):
            if row is not None:
                row.rewind(at)

    advances = True  # the host lists each repeat's key before it has the token (``DryRow.pending``)

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        self.ahead = tokens


_NONE = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), [])
_zeros = device_constant(lambda batch: mx.zeros((batch, 1), dtype=mx.int32))
_zero_row = device_constant(lambda vocab: mx.zeros((1, vocab), dtype=mx.float32))
_PAD = {"dry_keys": PAD_KEY, "dry_tokens": 0, "dry_values": 0.0, "dry_completers": PAD_KEY}
"""What pads each input of the entries to a wider row (a padded entry never counts)."""


def _bucket(n: int, least: int) -> int:
    """``n`` rounded up to a power of two, at least ``least``: a new count of entries
    compiles the step again only when it passes one."""
    return max(least, 1 << max(n - 1, 0).bit_length())


def join_inputs(parts: Sequence[Inputs]) -> dict[str, mx.array]:
    """DRY's inputs of several one-row steps (scoring's positions) as one step's: each row's
    entries padded to the widest, and the breaker masks once (the rows of one run share
    their settings)."""
    out = {"dry_breakers": parts[0]["dry_breakers"]}
    for key in ("dry_set", "dry_last"):
        out[key] = mx.concatenate([part[key] for part in parts], axis=0)
    for key, pad in _PAD.items():
        width = max(part[key].shape[1] for part in parts)
        rows = [_widened(part[key], width, pad) for part in parts]
        out[key] = mx.concatenate(rows, axis=0)
    return out


def _widened(values: mx.array, width: int, pad: float) -> mx.array:
    extra = width - values.shape[1]
    return values if extra == 0 else mx.pad(values, [(0, 0), (0, extra)], constant_values=pad)


def _entries(rows: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]]) -> dict[str, mx.array]:
    """The rows' keyed entries and completers, padded to shared widths."""
    width = _bucket(max(len(r[1]) for r in rows), 8)
    completers = _bucket(max(len(r[3]) for r in rows), 1)
    keys = np.full((len(rows), width), _PAD["dry_keys"], np.int32)
    tokens = np.full((len(rows), width), _PAD["dry_tokens"], np.int32)
    values = np.full((len(rows), width), _PAD["dry_values"], np.float32)
    ends = np.full((len(rows), completers), _PAD["dry_completers"], np.int32)
    for i, (k, t, v, c) in enumerate(rows):
        keys[i, : len(k)], tokens[i, : len(t)], values[i, : len(v)], ends[i, : len(c)] = k, t, v, c
    return {
        "dry_keys": mx.array(keys),
        "dry_tokens": mx.array(tokens),
        "dry_values": mx.array(values),
        "dry_completers": mx.array(ends),
    }


def _row(ctx: StateContext, params: SamplingParams, history: Sequence[int]) -> DryRow | None:
    return DryRow(history, ctx.breakers(params.dry_sequence_breakers)) if params.has_dry else None


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries) -> DryRows:
    return DryRows(ctx, [_row(ctx, p, h) for p, h in zip(params, histories, strict=True)])


def _prepare(ctx: StateContext, params: SamplingParams) -> None:
    if params.has_dry:
        ctx.breakers(params.dry_sequence_breakers)  # resolved (and cached) before any state changes


STAGE = Stage(SPEC, _apply, state=_state, prepare=_prepare, join=join_inputs)
