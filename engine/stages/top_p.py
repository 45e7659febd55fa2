"""``top_p``: nucleus sampling (Holtzman et al. 2020)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.top_p import SPEC
from engine.stages.base import NEG_INF, Inputs, Stage, sort_descending
from engine.stages.top_k import after_bounded_top_k, bounded_view


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


def apply_top_p_bounded(logits: mx.array, top_p: mx.array) -> mx.array:
    """:func:`apply_top_p` for *bounded* logits (``engine.stages.top_k.after_bounded_top_k``:
    top_p after a top_k of at most 256): the nucleus is read from the 256 largest values and
    the count of those tied with the last of them, not from a sort of the whole vocabulary.
    The tail's values all equal the 256th, so wherever the nucleus ends past it the
    threshold is that value, which the 256th already gives."""
    ordered, tail = bounded_view(logits)
    last = ordered[:, -1:]
    top = ordered[:, :1]
    mass = mx.sum(mx.exp(ordered - top), axis=-1, keepdims=True) + tail * mx.exp(last - top)
    probs = mx.exp(ordered - top) / mass
    before = mx.cumsum(probs, axis=-1) - probs
    kept = mx.sum(before < top_p, axis=-1, keepdims=True)
    threshold = mx.take_along_axis(ordered, mx.maximum(kept - 1, 0), axis=-1)
    threshold = mx.where(top_p >= 1.0, NEG_INF, threshold)
    return mx.where(logits < threshold, NEG_INF, logits)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_top_p(logits, inputs["top_p"])


STAGE = Stage(
    SPEC,
    _apply,
    lambda p: {"top_p": p.top_p},
    chain_forms=(("bounded", after_bounded_top_k, lambda x, inputs: apply_top_p_bounded(x, inputs["top_p"])),),
)
