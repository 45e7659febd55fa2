"""``bias``: ``logits + logit_bias``; always the first stage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.bias import SPEC
from engine.stages.base import Accepted, Inputs, Rows, Stage, StateContext, cpu_forms


def apply_bias(logits: mx.array, bias: mx.array) -> mx.array:
    """logits, bias: [B, V] float32 (a dense row of each request's logit_bias)."""
    return logits + bias


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_bias(logits, inputs["bias"])


class BiasRows:
    """Each row's logit_bias as a dense [B, V] array, made when first needed after a change.

    On a CPU also ``bias_factor`` = exp(bias - ``bias_top``) and ``bias_top``, each row's
    largest bias (0 where a token is left as it is), for the inspection pack: it finds the
    biased distribution's sums from raw's exponentials times this factor, an exp over the
    vocabulary fewer a step (``engine.sampling.inspection``). A GPU's pack computes every
    distribution's exp in one kernel: it takes the bias alone.
    """

    def __init__(self, vocab: int, params: Sequence[SamplingParams]) -> None:
        self.vocab = vocab
        self.biases = [p.logit_bias for p in params]
        self._dense: mx.array | None = None
        self._factor: tuple[mx.array, mx.array] | None = None

    def extend(self, other: BiasRows) -> None:
        self.biases += other.biases
        self._dense = self._factor = None

    def filter(self, keep: Sequence[int]) -> None:
        self.biases = [self.biases[i] for i in keep]
        self._dense = self._factor = None

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        self.biases[row] = new.logit_bias
        self._dense = self._factor = None

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        pass

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        host = None
        if self._dense is None:
            host = self._host()
            self._dense = mx.array(host)
        out = {"bias": rows.take(self._dense)}
        if cpu_forms():
            if self._factor is None:
                self._factor = bias_factor(self._host() if host is None else host)
            out["bias_factor"], out["bias_top"] = (rows.take(a) for a in self._factor)
        return out

    def _host(self) -> np.ndarray:
        dense = np.zeros((len(self.biases), self.vocab), dtype=np.float32)
        for row, bias in enumerate(self.biases):
            for token, value in bias.items():
                dense[row, token] = value
        return dense

    def carry(self, row: int) -> Any:
        return None

    advances = True  # the bias does not follow the tokens

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        pass

    def mark(self) -> Any:
        return None

    def rewind(self, mark: Any) -> None:
        pass


def bias_factor(dense: np.ndarray) -> tuple[mx.array, mx.array]:
    """exp(bias - top) [B, V] and top [B, 1], each row's largest bias (biases are finite:
    ``SamplingParams`` holds them to [-100, 100]), in float32; a factor under float32's
    range is 0 (its bias is more than 87 nats under the row's largest: its token's term
    counts only where every other's lies further under the pack's shift, and that Z is
    one the pack's check sends back to be packed whole)."""
    top = dense.max(axis=1, keepdims=True)
    with np.errstate(under="ignore"):
        factor = np.exp(dense.astype(np.float64) - top).astype(np.float32)
    return mx.array(factor), mx.array(top)


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries) -> BiasRows:
    return BiasRows(ctx.vocab, params)


STAGE = Stage(SPEC, _apply, state=_state)
