"""``typical_p``: locally typical sampling (Meister et al. 2022)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.typical_p import SPEC
from engine.stages.base import NEG_INF, Inputs, Stage, finite_mask, log_softmax
from engine.stages.top_k import after_bounded_top_k, bounded_view


def apply_typical_p(logits: mx.array, typical_p: mx.array) -> mx.array:
    """Order tokens by ``|-log p - H|`` (how far their surprisal is from the entropy) and
    keep them until their mass reaches p; every token as typical as the last one kept
    stays (Hugging Face's TypicalLogitsWarper; llama.cpp's ``typical`` sampler).

    logits: [B, V] float32; typical_p: [B, 1], 1 = off.
    """
    vocab = logits.shape[-1]
    finite = finite_mask(logits)
    logprobs = log_softmax(logits)
    probs = mx.exp(logprobs)
    entropy = -mx.sum(mx.where(finite, probs * logprobs, 0.0), axis=-1, keepdims=True)
    shifted = mx.where(finite, mx.abs(-logprobs - entropy), float("inf"))
    order = mx.argsort(shifted, axis=-1)
    sorted_shifted = mx.take_along_axis(shifted, order, axis=-1)
    mass = mx.cumsum(mx.take_along_axis(probs, order, axis=-1), axis=-1)
    last = mx.minimum(mx.sum(mass < typical_p, axis=-1, keepdims=True), vocab - 1)
    threshold = mx.take_along_axis(sorted_shifted, last, axis=-1)
    keep = (shifted <= threshold) | (typical_p >= 1.0)
    return mx.where(keep, logits, NEG_INF)


def apply_typical_p_bounded(logits: mx.array, typical_p: mx.array) -> mx.array:
    """:func:`apply_typical_p` for *bounded* logits (``engine.stages.top_k.after_bounded_top_k``):
    the entropy, the order by typicality and the mass are read from the 256 largest values
    plus one entry standing for the tail (the values tied with the 256th: one typicality,
    their summed mass), not from a sort of the whole vocabulary. A tie block's members
    share one threshold value, so counting it as one entry picks the same threshold."""
    ordered, tail = bounded_view(logits)
    top, last = ordered[:, :1], ordered[:, -1:]
    log_z = top + mx.log(mx.sum(mx.exp(ordered - top), axis=-1, keepdims=True) + tail * mx.exp(last - top))
    finite = ordered > NEG_INF
    lp = ordered - log_z
    probs = mx.exp(lp)
    lp_last = last - log_z
    tail_mass = tail * mx.exp(lp_last)
    entropy = -mx.sum(mx.where(finite, probs * lp, 0.0), axis=-1, keepdims=True)
    entropy = entropy - mx.where(tail > 0, tail_mass * lp_last, 0.0)
    devs = mx.concatenate(
        [
            mx.where(finite, mx.abs(-lp - entropy), float("inf")),
            mx.where(tail > 0, mx.abs(-lp_last - entropy), float("inf")),
        ],
        axis=-1,
    )
    masses = mx.concatenate([probs, tail_mass], axis=-1)
    order = mx.argsort(devs, axis=-1)
    sorted_devs = mx.take_along_axis(devs, order, axis=-1)
    mass = mx.cumsum(mx.take_along_axis(masses, order, axis=-1), axis=-1)
    at = mx.minimum(mx.sum(mass < typical_p, axis=-1, keepdims=True), devs.shape[-1] - 1)
    threshold = mx.take_along_axis(sorted_devs, at, axis=-1)
    shifted = mx.where(finite_mask(logits), mx.abs(-(logits - log_z) - entropy), float("inf"))
    keep = (shifted <= threshold) | (typical_p >= 1.0)
    return mx.where(keep, logits, NEG_INF)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_typical_p(logits, inputs["typical_p"])


STAGE = Stage(
    SPEC,
    _apply,
    lambda p: {"typical_p": p.typical_p},
    chain_forms=(("bounded", after_bounded_top_k, lambda x, inputs: apply_typical_p_bounded(x, inputs["typical_p"])),),
)
