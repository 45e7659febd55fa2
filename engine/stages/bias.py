"""``bias``: ``logits + logit_bias``; always the first stage."""

from __future__ import annotations

import mlx.core as mx

from engine.params import SamplingParams
from engine.stages.base import Inputs, Stage


def apply_bias(logits: mx.array, bias: mx.array) -> mx.array:
    """logits, bias: [B, V] float32 (a dense row of each request's logit_bias)."""
    return logits + bias


def _active(p: SamplingParams) -> bool:
    return bool(p.logit_bias)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_bias(logits, inputs["bias"])


STAGE = Stage("bias", _apply, _active, state=("bias",))
