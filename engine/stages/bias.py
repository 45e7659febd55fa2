"""``bias``: ``logits + logit_bias``; always the first stage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.bias import SPEC
from engine.stages.base import Accepted, Inputs, Rows, Stage, StateContext


def apply_bias(logits: mx.array, bias: mx.array) -> mx.array:
    """logits, bias: [B, V] float32 (a dense row of each request's logit_bias)."""
    return logits + bias


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_bias(logits, inputs["bias"])


class BiasRows:
    """Each row's logit_bias as a dense [B, V] array, made when first needed after a change."""

    def __init__(self, vocab: int, params: Sequence[SamplingParams]) -> None:
        self.vocab = vocab
        self.biases = [p.logit_bias for p in params]
        self._dense: mx.array | None = None

    def extend(self, other: BiasRows) -> None:
        self.biases += other.biases
        self._dense = None

    def filter(self, keep: Sequence[int]) -> None:
        self.biases = [self.biases[i] for i in keep]
        self._dense = None

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        self.biases[row] = new.logit_bias
        self._dense = None

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        pass

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        if self._dense is None:
            dense = np.zeros((len(self.biases), self.vocab), dtype=np.float32)
            for row, bias in enumerate(self.biases):
                for token, value in bias.items():
                    dense[row, token] = value
            self._dense = mx.array(dense)
        return {"bias": rows.take(self._dense)}

    def carry(self, row: int) -> Any:
        return None

    advances = True  # the bias does not follow the tokens

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        pass


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries) -> BiasRows:
    return BiasRows(ctx.vocab, params)


STAGE = Stage(SPEC, _apply, state=_state)
