"""The Kullback-Leibler divergence of two models' distributions, position by position."""

from __future__ import annotations

import numpy as np


def kl_divergences(base: np.ndarray, model: np.ndarray) -> np.ndarray:
    """[T] float64: KL(base ‖ model) of each row of two ``[T, V]`` float32 logprob arrays over
    the whole vocabulary, summed in float64 (two precisions of one model differ by 1e-7
    nats a token, under what a float32 sum of 49,152 terms keeps), never below 0 (rounding
    can make a zero divergence slightly negative). The one definition: the model
    comparison's and the precision check's."""
    return np.maximum(np.sum(np.exp(base) * (base - model), axis=-1, dtype=np.float64), 0.0)
