"""``typical_p``: locally typical sampling (Meister et al. 2022)."""

from __future__ import annotations

import mlx.core as mx

from engine.stages.base import NEG_INF, Inputs, Stage, finite_mask, log_softmax
from engine.stages.typical_p_spec import SPEC


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


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_typical_p(logits, inputs["typical_p"])


STAGE = Stage(SPEC, _apply, lambda p: {"typical_p": p.typical_p})
