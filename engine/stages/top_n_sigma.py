"""``top_n_sigma``: keep logits within n standard deviations of the maximum (Tang et al. 2024)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.top_n_sigma import SPEC
from engine.stages.base import NEG_INF, Inputs, Stage, device_constant, finite_mask


def apply_top_n_sigma(logits: mx.array, n: mx.array) -> mx.array:
    """Keep ``l >= max - n * sigma``, where sigma is the population standard deviation of
    the logits still in the distribution (llama.cpp's ``top_n_sigma``, which skips -inf).

    logits: [B, V] float32; n: [B, 1], 0 = off.
    """
    finite = finite_mask(logits)
    # The count and the sum of what is left as two lanes of one reduction (exact: a count
    # of ones is exact in float32 up to 2**24 tokens).
    x = logits[:, None]  # each lane reads the logits itself: one kernel
    in_x = x > NEG_INF
    sums = mx.sum(mx.where(_lanes() == 0, mx.where(in_x, 1.0, 0.0), mx.where(in_x, x, 0.0)), axis=-1)  # [B, 2]
    count = mx.maximum(sums[:, :1], 1.0)
    mean = sums[:, 1:] / count
    spread = mx.where(finite, (logits - mean) ** 2, 0.0)
    sigma = mx.sqrt(mx.sum(spread, axis=-1, keepdims=True) / count)
    top = mx.max(logits, axis=-1, keepdims=True)
    keep = (logits >= top - n * sigma) | (n <= 0.0)
    return mx.where(keep, logits, NEG_INF)


_lanes = device_constant(lambda: mx.arange(2, dtype=mx.int32)[:, None])


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_top_n_sigma(logits, inputs["top_n_sigma"])


STAGE = Stage(SPEC, _apply, lambda p: {"top_n_sigma": p.top_n_sigma})
