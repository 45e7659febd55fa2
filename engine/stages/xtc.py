"""``xtc``: exclude top choices (Weidmann 2024, as in llama.cpp and text-generation-webui)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.xtc import SPEC
from engine.stages.base import NEG_INF, Inputs, Stage, finite_mask, step_inputs
from engine.stages.rng import splitmix64


def apply_xtc(logits: mx.array, probability: mx.array, threshold: mx.array, coin: mx.array) -> mx.array:
    """When ``coin <= probability`` and two or more tokens have p >= threshold, remove all
    of them but the least likely one (llama.cpp's ``xtc``: never acts above 0.5).

    logits: [B, V] float32; probability, threshold, coin: [B, 1]; coin is uniform in
    [0, 1) from the request's own seeded RNG (seed and token index).
    """
    probs = mx.softmax(logits, axis=-1)
    # Only tokens still in the distribution: with threshold 0, removed ones (p = 0) would
    # count as "above" and make every real token look more likely than the least one.
    above = (probs >= threshold) & finite_mask(logits)
    least = mx.min(mx.where(above, probs, float("inf")), axis=-1, keepdims=True)
    acts = (probability > 0.0) & (coin <= probability) & (threshold <= 0.5)
    # A token more likely than the least above the threshold is above it too, and there are
    # then two or more above it: no count needed (a reduction, a kernel on a GPU), nor the
    # mask again (a token already removed stays removed).
    return mx.where(acts & (probs > least), NEG_INF, logits)


def _columns(p: SamplingParams) -> dict[str, float]:
    return {"xtc_probability": p.xtc_probability, "xtc_threshold": p.xtc_threshold}


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_xtc(logits, inputs["xtc_probability"], inputs["xtc_threshold"], inputs["xtc_coin"])


_XTC_SALT = 0x58544320434F494E  # "XTC COIN": a stream of its own, apart from the draw's


def xtc_coin(seed: int, index: int) -> float:
    """XTC's coin for a request's ``index``-th token, uniform in [0, 1): seed and index only."""
    return (splitmix64(seed ^ splitmix64(index) ^ _XTC_SALT) >> 11) * 2.0**-53


def _coins(params: list[SamplingParams], indices: list[int]) -> dict[str, mx.array]:
    coins = [xtc_coin(p.seed, i) for p, i in zip(params, indices, strict=True)]
    return {"xtc_coin": mx.array(np.asarray(coins, np.float32).reshape(-1, 1))}


STAGE = Stage(SPEC, _apply, _columns, state=step_inputs(_coins))
