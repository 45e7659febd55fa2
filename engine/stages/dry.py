"""``dry``: subtract each token's DRY penalty, computed on the host from the history.

The penalties themselves come from :mod:`engine.stages.dry_state` (llama.cpp's DRY semantics, kept
incrementally per row); this stage only applies the dense ``[B, V]`` result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.dry import SPEC
from engine.stages.base import Accepted, Inputs, Rows, Stage, StateContext
from engine.stages.dry_state import DryRow

# The penalty can overflow float32 (llama.cpp caps only the exponent): a token still in the
# distribution is pushed to this floor, never to -inf, so DRY after a truncation cannot
# leave a row with no token at all.
LOWEST_LOGIT = -1e30


def apply_dry(logits: mx.array, penalty: mx.array) -> mx.array:
    """logits, penalty: [B, V] float32 (0 where a token extends no repeat)."""
    penalized = mx.maximum(logits - penalty, LOWEST_LOGIT)
    return mx.where(logits > float("-inf"), penalized, logits)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_dry(logits, inputs["dry"])


class DryRows:
    """Each row's DRY state (:class:`engine.stages.dry_state.DryRow`, on the host), None while DRY is off."""

    def __init__(self, ctx: StateContext, rows: list[DryRow | None]) -> None:
        self.ctx = ctx
        self.rows = rows

    def extend(self, other: DryRows) -> None:
        self.rows += other.rows

    def filter(self, keep: Sequence[int]) -> None:
        self.rows = [self.rows[i] for i in keep]

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

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        dense = np.zeros((len(rows.rows), self.ctx.vocab), dtype=np.float32)
        for i, r in enumerate(rows.rows):
            if self.rows[r] is not None:
                tokens, values = self.rows[r].penalties(params[r])
                dense[i, tokens] = values
        return {"dry": mx.array(dense)}

    def carry(self, row: int) -> Any:
        return None

    advances = False  # the repeats are matched on the host

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        raise NotImplementedError


def _row(ctx: StateContext, params: SamplingParams, history: Sequence[int]) -> DryRow | None:
    return DryRow(history, ctx.breakers(params.dry_sequence_breakers)) if params.has_dry else None


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries) -> DryRows:
    return DryRows(ctx, [_row(ctx, p, h) for p, h in zip(params, histories, strict=True)])


def _prepare(ctx: StateContext, params: SamplingParams) -> None:
    if params.has_dry:
        ctx.breakers(params.dry_sequence_breakers)  # resolved (and cached) before any state changes


STAGE = Stage(SPEC, _apply, state=_state, prepare=_prepare)
