"""``top_n_sigma``: keep logits within n standard deviations of the maximum (Tang et al. 2024)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.top_n_sigma import SPEC
from engine.stages.base import NEG_INF, Inputs, Stage, count_and_total, finite_mask


def apply_top_n_sigma(logits: mx.array, n: mx.array) -> mx.array:
    """Keep ``l >= max - n * sigma``, where sigma is the population standard deviation of
    the logits still in the distribution (llama.cpp's ``top_n_sigma``, which skips -inf).

    logits: [B, V] float32; n: [B, 1], 0 = off.
    """
    finite = finite_mask(logits)
    count, total = count_and_total(logits, logits[:, None])
    count = mx.maximum(count, 1.0)
    mean = total / count
    spread = mx.where(finite, (logits - mean) ** 2, 0.0)
    sigma = mx.sqrt(mx.sum(spread, axis=-1, keepdims=True) / count)
    top = mx.max(logits, axis=-1, keepdims=True)
    keep = (logits >= top - n * sigma) | (n <= 0.0)
    return mx.where(keep, logits, NEG_INF)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_top_n_sigma(logits, inputs["top_n_sigma"])


STAGE = Stage(SPEC, _apply, lambda p: {"top_n_sigma": p.top_n_sigma})
