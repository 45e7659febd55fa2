"""``top_k``: keep the k most likely tokens (ties with the k-th are kept)."""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from engine.api.params import SamplingParams
from engine.specs.top_k import SPEC
from engine.stages.base import NEG_INF, BoundedView, Inputs, Stage, sort_descending


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


def bounded_top_k(logits: mx.array, inputs: Inputs, view: BoundedView | None) -> tuple[mx.array, BoundedView]:
    """:func:`apply_top_k` for rows with ``top_k <= BOUND``: the k-th largest value is the
    same whether it is read from the whole sorted row or from its ``BOUND`` largest, sorted
    (``view``'s, where the chain has it). Also the output's view, as :func:`bounded_view`
    would make it: the largest are those of the input from the k-th up, and the tail is
    counted (a sum the stage after it would have made; unused, it is never computed)."""
    top_k = inputs["top_k"]
    ordered = view.ordered if view is not None else _ordered(logits)
    kth = mx.take_along_axis(ordered, mx.clip(top_k - 1, 0, ordered.shape[-1] - 1), axis=-1)
    out = mx.where(logits < mx.where(top_k > 0, kth, NEG_INF), NEG_INF, logits)
    whole = BoundedView(ordered, _tail(out, ordered.shape[-1]), ordered[:, :1])  # the tail: the output's
    return out, whole.cut(mx.where(top_k >= 1, kth, NEG_INF))  # written apart (``BoundedView.cut``)


KEEPS_VALUES = frozenset({"temperature", "top_n_sigma", "typical_p", "top_p", "min_p", "xtc"})
"""Stages that only remove tokens or divide every logit of a row by one positive number:
after them the output of a bounded ``top_k`` is still *bounded* (below)."""


def after_bounded_top_k(params: Sequence[SamplingParams], before: Sequence[str], forms: Sequence[str | None]) -> bool:
    """Whether the logits reaching a stage are *bounded* for every row: their finite values
    outside the ``BOUND`` largest all equal the ``BOUND``-th largest. A ``bounded`` top_k
    with k >= 1 leaves them so (every value above its k-th largest is among the k - 1
    largest; the rest it keeps equal the k-th), and :data:`KEEPS_VALUES` keep them so."""
    for name, form in zip(reversed(before), reversed(forms), strict=True):
        if name == "top_k":
            return form == "bounded" and all(p.top_k >= 1 for p in params)
        if name not in KEEPS_VALUES:
            return False
    return False


def apply_bounded_top_k(logits: mx.array, top_k: mx.array) -> mx.array:
    """:func:`bounded_top_k`'s output, for logits alone. top_k: [B, 1] int32, each <= ``BOUND``."""
    return bounded_top_k(logits, {"top_k": top_k}, None)[0]


def bounded_view(logits: mx.array, view: BoundedView | None = None) -> BoundedView:
    """For *bounded* logits: their ``BOUND`` largest, sorted descending [B, M], and how many
    finite values lie outside them [B, 1] float32 (each equal to the last of the M); ``view``
    where the chain carries it already (``Stage.viewed``)."""
    if view is not None:
        return view
    ordered = _ordered(logits)
    return BoundedView(ordered, _tail(logits, ordered.shape[-1]), ordered[:, :1])


def _ordered(logits: mx.array) -> mx.array:
    """[B, M]: the ``BOUND`` largest logits (or all), descending."""
    return sort_descending(mx.topk(logits, min(BOUND, logits.shape[-1]), axis=-1))


def _tail(logits: mx.array, bound: int) -> mx.array:
    finite = mx.sum(logits > NEG_INF, axis=-1, keepdims=True)
    return mx.maximum(finite - bound, 0).astype(mx.float32)


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
    viewed=bounded_top_k,
)
