"""``mirostat_v2``: Mirostat 2.0 (Basu et al. 2021), as llama.cpp's ``mirostat_v2`` sampler.

Each row keeps μ, a surprise budget in bits. The stage keeps the tokens whose surprise
``-log2 p`` is at most μ (at least the most likely one), the draw picks from what is
left, and μ then moves by ``η·(τ − s)``, ``s`` being the drawn token's surprise in the
renormalized set: the logprob this stage reports for it. μ is state that the history
alone cannot rebuild (it depends on every earlier distribution), so it is carried: a
branch restores it as it was before the branch point, and scoring updates it with each
scored token in order (``needs_result``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.mirostat_v2 import LN2, SPEC, next_mu
from engine.stages.base import NEG_INF, Accepted, Inputs, Rows, Stage, StateContext, log_softmax


def apply_mirostat_v2(logits: mx.array, mu: mx.array) -> mx.array:
    """Keep ``-log2 p <= mu`` over the tokens still in the distribution, and always the most
    likely (llama.cpp keeps exactly one when none passes; here its ties stay too, as in
    ``top_k``).

    logits: [B, V] float32; mu: [B, 1] float32, in bits.
    """
    surprise_nats = -log_softmax(logits)
    top = mx.max(logits, axis=-1, keepdims=True)
    keep = (surprise_nats <= mu * LN2) | (logits >= top)
    return mx.where(keep, logits, NEG_INF)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_mirostat_v2(logits, inputs["mirostat_mu"])


class MuRows:
    """Each row's μ (host floats)."""

    def __init__(self, mus: list[float]) -> None:
        self.mus = mus

    def extend(self, other: MuRows) -> None:
        self.mus += other.mus

    def filter(self, keep: Sequence[int]) -> None:
        self.mus = [self.mus[i] for i in keep]

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        # μ is carried through a live change; a stage joining the chain starts afresh at 2τ.
        if not SPEC.active(old) and SPEC.active(new):
            self.mus[row] = 2.0 * new.mirostat_tau

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        for row, (p, a) in enumerate(zip(params, accepted, strict=True)):
            logprob = a.logprob_at(SPEC.name)
            # Not in the chain, or a forced token the stage removed: μ stays (llama.cpp's
            # mirostat moves μ only from its own draws).
            if logprob is not None and math.isfinite(logprob):
                self.mus[row] = next_mu(self.mus[row], p.mirostat_tau, p.mirostat_eta, logprob)

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        mus = np.asarray([self.mus[r] for r in rows.rows], np.float32).reshape(-1, 1)
        return {"mirostat_mu": mx.array(mus)}

    def carry(self, row: int) -> Any:
        return self.mus[row]

    advances = False  # μ moves by the drawn token's logprob, read on the host

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        raise NotImplementedError


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries: Sequence[Any]) -> MuRows:
    return MuRows([c if c is not None else 2.0 * p.mirostat_tau for p, c in zip(params, carries, strict=True)])


STAGE = Stage(SPEC, _apply, state=_state, needs_result=True)
