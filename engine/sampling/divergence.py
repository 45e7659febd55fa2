"""How far the variants of a fork group drift apart: the Jensen–Shannon divergence of
their final distributions at the same token index (on the device, inside the step's
one transfer), and the first index where their drawn tokens differ."""

from __future__ import annotations

import math
from collections.abc import Sequence

import mlx.core as mx

from engine.stages.base import log_softmax


def js_divergence(a: mx.array, b: mx.array) -> mx.array:
    """[P, V] logits (-inf = removed) -> [P] Jensen–Shannon divergence in nats, in [0, ln 2].

    JS(P, Q) = ½ KL(P ‖ M) + ½ KL(Q ‖ M), M = ½ (P + Q); tokens a distribution gives
    probability 0 contribute nothing to its own term.
    """
    log_p, log_q = log_softmax(a), log_softmax(b)
    p, q = mx.exp(log_p), mx.exp(log_q)
    log_m = mx.log(0.5 * (p + q))
    kl_p = mx.sum(mx.where(p > 0, p * (log_p - log_m), 0.0), axis=-1)
    kl_q = mx.sum(mx.where(q > 0, q * (log_q - log_m), 0.0), axis=-1)
    # Disjoint supports give exactly ln 2; float32 sums of p can pass 1 by a few 1e-5.
    return mx.clip(0.5 * (kl_p + kl_q), 0.0, math.log(2.0))


def group_pairs(groups: Sequence[int | None]) -> list[tuple[int, int]]:
    """Row pairs (i < j) of the same fork group, in row order."""
    pairs = []
    for i, gi in enumerate(groups):
        if gi is None:
            continue
        pairs.extend((i, j) for j in range(i + 1, len(groups)) if groups[j] == gi)
    return pairs


def pair_divergences(final: mx.array, pairs: Sequence[tuple[int, int]]) -> mx.array:
    """[P] JS divergences of the rows of ``final`` [B, V] named by ``pairs``."""
    first = mx.array([i for i, _ in pairs], dtype=mx.int32)
    second = mx.array([j for _, j in pairs], dtype=mx.int32)
    return js_divergence(final[first], final[second])
