"""``top_k``: keep the k most likely tokens (ties with the k-th are kept)."""

from __future__ import annotations

import mlx.core as mx

from engine.stages.base import NEG_INF, Inputs, Stage, sort_descending
from engine.stages.top_k_spec import SPEC


def apply_top_k(logits: mx.array, top_k: mx.array) -> mx.array:
    """Keep logits >= the k-th largest. top_k: [B, 1] int32, 0 = off.

    Hugging Face's TopKLogitsWarper keeps ties the same way; llama.cpp keeps exactly k.
    """
    vocab = logits.shape[-1]
    ordered = sort_descending(logits)
    kth = mx.take_along_axis(ordered, mx.clip(top_k - 1, 0, vocab - 1), axis=-1)
    kth = mx.where(top_k > 0, kth, NEG_INF)
    return mx.where(logits < kth, NEG_INF, logits)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_top_k(logits, inputs["top_k"])


STAGE = Stage(SPEC, _apply, lambda p: {"top_k": p.top_k}, int_columns=("top_k",))
