"""``min_p``: drop tokens less likely than ``min_p`` times the most likely (Nguyen et al. 2024)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.min_p import SPEC
from engine.stages.base import NEG_INF, BoundedView, Inputs, Stage
from engine.stages.top_k import after_bounded_top_k


def apply_min_p(logits: mx.array, min_p: mx.array) -> mx.array:
    """Keep p >= min_p * p_max, in log space: l >= l_max + log(min_p); log(0) = -inf keeps all.

    logits: [B, V] float32; min_p: [B, 1], 0 = off.
    """
    return min_p_viewed(logits, {"min_p": min_p}, None)[0]


def min_p_viewed(logits: mx.array, inputs: Inputs, view: BoundedView | None) -> tuple[mx.array, BoundedView | None]:
    """:func:`apply_min_p`, reading the most likely logit from ``view`` where the chain
    carries one (``Stage.viewed``: a reduction over the vocabulary fewer); what it keeps is
    a prefix of the largest, so the output's view follows."""
    top = mx.max(logits, axis=-1, keepdims=True) if view is None else view.top
    out = mx.where(logits < top + mx.log(inputs["min_p"]), NEG_INF, logits)
    return out, None if view is None else view.cut(mx.log(inputs["min_p"]) + top)  # written apart


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_min_p(logits, inputs["min_p"])


STAGE = Stage(
    SPEC,
    _apply,
    lambda p: {"min_p": p.min_p},
    chain_forms=(("bounded", after_bounded_top_k, _apply),),
    viewed=min_p_viewed,
)
