"""``min_p``: drop tokens less likely than ``min_p`` times the most likely (Nguyen et al. 2024)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.min_p import SPEC
from engine.stages.base import NEG_INF, Inputs, Stage


def apply_min_p(logits: mx.array, min_p: mx.array) -> mx.array:
    """Keep p >= min_p * p_max, in log space: l >= l_max + log(min_p); log(0) = -inf keeps all.

    logits: [B, V] float32; min_p: [B, 1], 0 = off.
    """
    top = mx.max(logits, axis=-1, keepdims=True)
    return mx.where(logits < top + mx.log(min_p), NEG_INF, logits)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_min_p(logits, inputs["min_p"])


STAGE = Stage(SPEC, _apply, lambda p: {"min_p": p.min_p})
