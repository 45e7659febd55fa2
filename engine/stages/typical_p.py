"""``typical_p``: locally typical sampling (Meister et al. 2022)."""

from __future__ import annotations

import mlx.core as mx

from engine.specs.typical_p import SPEC
from engine.stages.base import NEG_INF, BoundedView, Inputs, Stage, device_constant, finite_mask, log_softmax
from engine.stages.top_k import after_bounded_top_k, bounded_view


def apply_typical_p(logits: mx.array, typical_p: mx.array) -> mx.array:
    """Order tokens by ``|-log p - H|`` (how far their surprisal is from the entropy) and
    keep them until their mass reaches p; every token as typical as the last one kept
    stays (Hugging Face's TypicalLogitsWarper; llama.cpp's ``typical`` sampler).

    logits: [B, V] float32; typical_p: [B, 1], 1 = off.
    """
    finite = finite_mask(logits)
    logprobs = log_softmax(logits)
    probs = mx.exp(logprobs)
    entropy = -mx.sum(mx.where(finite, probs * logprobs, 0.0), axis=-1, keepdims=True)
    shifted = mx.where(finite, mx.abs(-logprobs - entropy), float("inf"))
    order = mx.argsort(shifted, axis=-1)
    sorted_shifted = mx.take_along_axis(shifted, order, axis=-1)
    mass = mx.cumsum(mx.take_along_axis(probs, order, axis=-1), axis=-1)
    keep = (shifted <= _threshold(sorted_shifted, mass, typical_p)) | (typical_p >= 1.0)
    return mx.where(keep, logits, NEG_INF)


def _threshold(sorted_devs: mx.array, mass: mx.array, typical_p: mx.array) -> mx.array:
    """The typicality of the first token whose running ``mass`` reaches p (the last token
    when none does). ``sorted_devs`` and ``mass`` never decrease, so it is the least of the
    typicalities where the mass reached p: one masked minimum, where a count, a clamp and a
    gather were."""
    fallback = sorted_devs[:, -1:]
    return mx.min(mx.where(mass >= typical_p, sorted_devs, fallback), axis=-1, keepdims=True)


def apply_typical_p_bounded(logits: mx.array, typical_p: mx.array) -> mx.array:
    """:func:`typical_p_bounded`'s output, for bounded logits alone."""
    return typical_p_bounded(logits, {"typical_p": typical_p}, None)[0]


def typical_p_bounded(logits: mx.array, inputs: Inputs, view: BoundedView | None) -> tuple[mx.array, None]:
    """:func:`apply_typical_p` for *bounded* logits (``engine.stages.top_k.after_bounded_top_k``):
    the entropy, the order by typicality and the mass are read from the 256 largest values
    plus one entry standing for the tail (the values tied with the 256th: one typicality,
    their summed mass; ``view``, where the chain carries it), not from a sort of the whole
    vocabulary. A tie block's members share one threshold value, so counting it as one
    entry picks the same threshold. What it keeps is no prefix of the largest: no view out."""
    typical_p = inputs["typical_p"]
    ordered, tail, top = bounded_view(logits, view)
    last = ordered[:, -1:]
    log_z = top + mx.log(mx.sum(mx.exp(ordered - top), axis=-1, keepdims=True) + tail * mx.exp(last - top))
    finite = ordered > NEG_INF
    lp = ordered - log_z
    probs = mx.exp(lp)
    lp_last = last - log_z
    tail_mass = tail * mx.exp(lp_last)
    entropy = -mx.sum(mx.where(finite, probs * lp, 0.0), axis=-1, keepdims=True)
    entropy = entropy - mx.where(tail > 0, tail_mass * lp_last, 0.0)
    # The 256 values and the tail's entry (its value, ``tail`` times) in one row: each
    # entry's typicality and mass are the same expressions of its value wherever it sits,
    # so the sorted ones come from one gather of the values (two gathers and two
    # concatenations were).
    values = mx.concatenate([ordered, last], axis=-1)
    is_tail = _tail_slot(values.shape[-1])
    devs = _typicality(values, is_tail, tail, log_z, entropy)
    order = mx.argsort(devs, axis=-1)
    sorted_values = mx.take_along_axis(values, order, axis=-1)
    # Written apart for each reader (``order >= last`` is ``order == last``), so that MLX's
    # compile does not keep what the two share as kernels of their own.
    at_tail = values.shape[-1] - 1
    sorted_devs = _typicality(sorted_values, order == at_tail, tail, log_z, entropy)
    own = mx.exp(sorted_values - log_z)
    mass = mx.cumsum(mx.where(order >= at_tail, tail * own, own), axis=-1)
    threshold = _threshold(sorted_devs, mass, typical_p)
    shifted = mx.where(finite_mask(logits), mx.abs(-(logits - log_z) - entropy), float("inf"))
    keep = (shifted <= threshold) | (typical_p >= 1.0)
    return mx.where(keep, logits, NEG_INF), None


def _typicality(values: mx.array, is_tail: mx.array, tail: mx.array, log_z: mx.array, entropy: mx.array) -> mx.array:
    """``|-log p - H|`` of bounded entries (``is_tail``: the tail's, present when ``tail > 0``);
    +inf for an entry not in the distribution."""
    present = mx.where(is_tail, tail > 0, values > NEG_INF)
    # (log_z - values) is -(values - log_z) to the bit.
    return mx.where(present, mx.abs((log_z - values) - entropy), float("inf"))


_tail_slot = device_constant(lambda width: (mx.arange(width) == width - 1)[None])
"""[1, width] bool: the last entry of a bounded row with its tail's."""


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_typical_p(logits, inputs["typical_p"])


STAGE = Stage(
    SPEC,
    _apply,
    lambda p: {"typical_p": p.typical_p},
    chain_forms=(("bounded", after_bounded_top_k, lambda x, inputs: apply_typical_p_bounded(x, inputs["typical_p"])),),
    viewed=typical_p_bounded,
)
