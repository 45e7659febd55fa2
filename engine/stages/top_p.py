"""``top_p``: nucleus sampling (Holtzman et al. 2020)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.top_p import SPEC
from engine.stages.base import NEG_INF, BoundedView, Inputs, Stage, sort_descending
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
    return _cut(logits, ordered, before, top_p)


def _cut(logits: mx.array, ordered: mx.array, before: mx.array, top_p: mx.array) -> mx.array:
    """Keep ``logits`` down to the last of ``ordered`` (descending) whose mass ``before`` it
    is below p (:func:`_least_kept`; p = 1 keeps everything)."""
    threshold = mx.where(top_p >= 1.0, NEG_INF, _least_kept(ordered, before, top_p))
    return mx.where(logits < threshold, NEG_INF, logits)


def _least_kept(ordered: mx.array, before: mx.array, top_p: mx.array) -> mx.array:
    """The least value top_p keeps below p = 1. ``before`` never decreases, so the tokens it
    keeps are a prefix of ``ordered`` and the threshold is the least of them: one masked
    minimum (the largest when none is, as p = 0 keeps the top token), where a count and a
    gather were."""
    return mx.min(mx.where(before < top_p, ordered, ordered[:, :1]), axis=-1, keepdims=True)


def top_p_bounded(logits: mx.array, inputs: Inputs, view: BoundedView | None) -> tuple[mx.array, BoundedView]:
    """:func:`apply_top_p` for *bounded* logits (``engine.stages.top_k.after_bounded_top_k``:
    top_p after a top_k of at most 256): the nucleus is read from the 256 largest values and
    the count of those tied with the last of them (``view``, where the chain carries it),
    not from a sort of the whole vocabulary. The tail's values all equal the 256th, so
    wherever the nucleus ends past it the threshold is that value, which the 256th already
    gives. Also the output's view: what it keeps is a prefix of the largest."""
    view = bounded_view(logits, view)
    ordered, tail, top = view
    top_p = inputs["top_p"]
    last = ordered[:, -1:]
    mass = mx.sum(mx.exp(ordered - top), axis=-1, keepdims=True) + tail * mx.exp(last - top)
    probs = mx.exp(ordered - top) / mass
    before = mx.cumsum(probs, axis=-1) - probs
    least = _least_kept(ordered, before, top_p)
    # The view's threshold written apart from the logits' (``BoundedView.cut``).
    return _cut(logits, ordered, before, top_p), view.cut(mx.where(top_p < 1.0, least, NEG_INF))


def apply_top_p_bounded(logits: mx.array, top_p: mx.array) -> mx.array:
    """:func:`top_p_bounded`'s output, for bounded logits alone."""
    return top_p_bounded(logits, {"top_p": top_p}, None)[0]


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_top_p(logits, inputs["top_p"])


STAGE = Stage(
    SPEC,
    _apply,
    lambda p: {"top_p": p.top_p},
    chain_forms=(("bounded", after_bounded_top_k, lambda x, inputs: apply_top_p_bounded(x, inputs["top_p"])),),
    viewed=top_p_bounded,
)
