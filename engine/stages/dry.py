"""``dry``: subtract each token's DRY penalty, computed on the host from the history.

The penalties themselves come from :mod:`engine.dry` (llama.cpp's DRY semantics, kept
incrementally per row); this stage only applies the dense ``[B, V]`` result.
"""

from __future__ import annotations

import mlx.core as mx

from engine.params import SamplingParams
from engine.stages.base import Inputs, Stage

# The penalty can overflow float32 (llama.cpp caps only the exponent): a token still in the
# distribution is pushed to this floor, never to -inf, so DRY after a truncation cannot
# leave a row with no token at all.
LOWEST_LOGIT = -1e30


def apply_dry(logits: mx.array, penalty: mx.array) -> mx.array:
    """logits, penalty: [B, V] float32 (0 where a token extends no repeat)."""
    penalized = mx.maximum(logits - penalty, LOWEST_LOGIT)
    return mx.where(logits > float("-inf"), penalized, logits)


def _active(p: SamplingParams) -> bool:
    return p.has_dry


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_dry(logits, inputs["dry"])


STAGE = Stage("dry", _apply, _active, state=("dry",))
