"""``top_k``: keep the k most likely tokens (ties with the k-th are kept)."""

from __future__ import annotations

import mlx.core as mx

from engine.params import SamplingParams
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


BOUND = 256
"""The largest ``top_k`` of the bounded form: a partial selection of this many values
instead of a sort of the whole vocabulary."""


def apply_bounded_top_k(logits: mx.array, top_k: mx.array) -> mx.array:
    """:func:`apply_top_k` for rows with ``top_k <= BOUND``: the k-th largest value is the
    same whether it is read from the whole sorted row or from its ``BOUND`` largest, sorted."""
    vocab = logits.shape[-1]
    bound = min(BOUND, vocab)
    ordered = sort_descending(mx.topk(logits, bound, axis=-1))
    kth = mx.take_along_axis(ordered, mx.clip(top_k - 1, 0, bound - 1), axis=-1)
    kth = mx.where(top_k > 0, kth, NEG_INF)
    return mx.where(logits < kth, NEG_INF, logits)


def _bounded(p: SamplingParams) -> bool:
    return p.top_k <= BOUND


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_top_k(logits, inputs["top_k"])


STAGE = Stage(
    SPEC,
    _apply,
    lambda p: {"top_k": p.top_k},
    int_columns=("top_k",),
    forms=(("bounded", _bounded, lambda logits, inputs: apply_bounded_top_k(logits, inputs["top_k"])),),
)
