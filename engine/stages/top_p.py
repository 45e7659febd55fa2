"""``top_p``: nucleus sampling (Holtzman et al. 2020)."""

from __future__ import annotations

import mlx.core as mx

from engine.stages.base import NEG_INF, Inputs, Stage, sort_descending
from engine.stages.top_p_spec import SPEC


def apply_top_p(logits: mx.array, top_p: mx.array) -> mx.array:
    """Keep the smallest set of most likely tokens whose probability reaches p: a token
    stays when the mass of the tokens more likely than it is below p.

    logits: [B, V] float32; top_p: [B, 1], 1 = off (keeps everything even where the
    running sum rounds to 1 early).
    """
    ordered = sort_descending(logits)
    probs = mx.softmax(ordered, axis=-1)
    before = mx.cumsum(probs, axis=-1) - probs
    kept = mx.sum(before < top_p, axis=-1, keepdims=True)
    threshold = mx.take_along_axis(ordered, mx.maximum(kept - 1, 0), axis=-1)
    threshold = mx.where(top_p >= 1.0, NEG_INF, threshold)
    return mx.where(logits < threshold, NEG_INF, logits)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_top_p(logits, inputs["top_p"])


STAGE = Stage(SPEC, _apply, lambda p: {"top_p": p.top_p})
