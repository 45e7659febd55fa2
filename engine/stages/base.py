"""What a stage is: a name, a pure ``apply`` over the batch, and its per-row inputs.

Like llama.cpp's ``llama_sampler_i``: ``apply(logits, inputs)`` maps ``[B, V] float32``
logits to logits, reading per-row parameters as ``[B, 1]`` arrays from ``inputs``. A
neutral value makes a stage the exact identity for its row, so rows with different
settings share one graph. Stages with state (penalty counts, DRY) read it from
``inputs`` too; the scheduler's batch keeps that state in step with the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import mlx.core as mx

from engine.params import SamplingParams

NEG_INF = float("-inf")

Inputs = Mapping[str, mx.array]


@dataclass(frozen=True)
class Stage:
    name: str
    apply: Callable[[mx.array, Inputs], mx.array]
    """logits [B, V] float32, inputs -> logits [B, V] float32; pure."""
    active: Callable[[SamplingParams], bool]
    """Whether this stage changes anything for a row with these parameters."""
    columns: Callable[[SamplingParams], Mapping[str, float]] = lambda p: {}
    """This row's scalar inputs, by input name (become [B, 1] float32 arrays)."""
    int_columns: tuple[str, ...] = ()
    """Inputs among ``columns`` that are int32, not float32."""
    state: tuple[str, ...] = field(default=())
    """Inputs the scheduler supplies from per-row state each step (e.g. ``counts``)."""
    identity: Callable[[SamplingParams], bool] | None = None
    """Whether the stage leaves a row's logits exactly as they are (default: not active).
    A stage that is the identity for every row of a group is not computed at all."""

    def is_identity(self, params: SamplingParams) -> bool:
        return self.identity(params) if self.identity is not None else not self.active(params)


def log_softmax(logits: mx.array) -> mx.array:
    """[B, V] -> [B, V]; -inf stays -inf."""
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def sort_descending(logits: mx.array) -> mx.array:
    return -mx.sort(-logits, axis=-1)


def finite_mask(logits: mx.array) -> mx.array:
    """Tokens still in the distribution (removed ones are -inf)."""
    return logits > NEG_INF
