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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.specs.mirostat_v2 import LN2, LOG2_E_FLOAT32, SPEC, next_mu
from engine.stages.base import NEG_INF, Accepted, Inputs, Rows, Stage, StateContext, cpu_forms


def apply_mirostat_v2(logits: mx.array, mu: mx.array) -> mx.array:
    """Keep ``-log2 p <= mu`` over the tokens still in the distribution, and always the most
    likely (llama.cpp keeps exactly one when none passes; here its ties stay too, as in
    ``top_k``).

    logits: [B, V] float32; mu: [B, 1] float32, in bits.
    """
    top = mx.max(logits, axis=-1, keepdims=True)
    surprise_nats = _log_z(logits - top) - (logits - top)
    keep = (surprise_nats <= mu * LN2) | (logits >= top)
    return mx.where(keep, logits, NEG_INF)


SUM_BLOCK = 128
"""Tokens summed together first on a CPU (:func:`_log_z`), as the inspection pack sums its
Z (``engine.sampling.inspection.BLOCK``)."""


def _log_z(shifted: mx.array) -> mx.array:
    """[B, V] logits less their max -> [B, 1] log Z. On a CPU by blocks of ``SUM_BLOCK``,
    then the blocks, as the pack sums the Z its reported logprobs are over: MLX's CPU
    ``logsumexp`` adds the tail of tiny probabilities one by one to the top token's 1.0 and
    loses those under half its ulp (about 1e-4 nats of log Z on a peaked 49,152-token
    step), so the cut kept tokens whose reported surprise was above μ. A GPU's reduction is
    a tree already."""
    if not cpu_forms():
        return mx.logsumexp(shifted, axis=-1, keepdims=True)
    vocab = shifted.shape[-1]
    blocks = shifted.reshape(shifted.shape[0], -1, SUM_BLOCK if vocab % SUM_BLOCK == 0 else vocab)
    return mx.log(mx.sum(mx.sum(mx.exp(blocks), axis=-1), axis=-1, keepdims=True))


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_mirostat_v2(logits, inputs["mirostat_mu"])


class MuRows:
    """Each row's μ: host floats (float32 values), the canonical ones; and the μ the step
    computed after its tokens on the device (``updated``, its groups' joined),
    which a step sampled ahead reads before the host has the token (``advance``). The host's
    ``accept`` then checks that μ against its own (``ahead_held``)."""

    def __init__(self, mus: list[float]) -> None:
        self.mus = mus
        self.stepped: mx.array | None = None  # [B, 1]: μ after the last step's tokens, on the device
        self.ahead: mx.array | None = None  # [B, 1]: the μ the step sampled ahead read
        self._held = True

    def extend(self, other: MuRows) -> None:
        self.mus += other.mus
        self.stepped = self.ahead = None

    def filter(self, keep: Sequence[int]) -> None:
        self.mus = [self.mus[i] for i in keep]
        index = mx.array(list(keep), dtype=mx.int32)
        self.stepped = None if self.stepped is None else self.stepped[index]
        self.ahead = None if self.ahead is None else self.ahead[index]

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        # μ is carried through a live change; a stage joining the chain starts afresh at 2τ.
        if not SPEC.active(old) and SPEC.active(new):
            self.mus[row] = 2.0 * new.mirostat_tau
        self.stepped = None

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        for row, (p, a) in enumerate(zip(params, accepted, strict=True)):
            logprob = a.logprob_at(SPEC.name)
            # Not in the chain, or a forced token the stage removed: μ stays (llama.cpp's
            # mirostat moves μ only from its own draws).
            if logprob is not None and math.isfinite(logprob):
                self.mus[row] = next_mu(self.mus[row], p.mirostat_tau, p.mirostat_eta, logprob)
        self._held = self.ahead is None or bool(np.array_equal(np.asarray(self.ahead)[:, 0], _host(self.mus)))
        self.ahead = None

    def ahead_held(self) -> bool:
        return self._held

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        if self.ahead is not None:
            return {"mirostat_mu": rows.take(self.ahead)}
        self.stepped = None  # a step on the host's μ: what the last one computed is void
        return {"mirostat_mu": mx.array(_host([self.mus[r] for r in rows.rows]).reshape(-1, 1))}

    def update_inputs(self) -> dict[str, mx.array]:
        return {}  # τ and η are the stage's columns

    def updated(self, new: Mapping[str, mx.array]) -> None:
        self.stepped = new["mirostat_mu"]

    def carry(self, row: int) -> Any:
        return self.mus[row]

    def mark(self) -> Any:
        return list(self.mus), self.stepped, self.ahead, self._held

    def rewind(self, mark: Any) -> None:
        mus, self.stepped, self.ahead, self._held = mark
        self.mus = list(mus)

    @property
    def advances(self) -> bool:
        """Only after a step that computed μ after its tokens."""
        return self.stepped is not None

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        self.ahead, self.stepped = self.stepped, None


def _host(mus: Sequence[float]) -> np.ndarray:
    return np.asarray(mus, np.float32)


def next_mu_on_device(mu: mx.array, tau: mx.array, eta: mx.array, logprob: mx.array) -> mx.array:
    """:func:`engine.specs.mirostat_v2.next_mu` of every row ([B, 1] float32 each), in the same
    float32 operations; μ stays where the token was removed (a forced one)."""
    moved = mu - eta * ((-logprob) * float(LOG2_E_FLOAT32) - tau)
    return mx.where(logprob > NEG_INF, moved, mu)


def _columns(p: SamplingParams) -> dict[str, float]:
    return {"mirostat_tau": p.mirostat_tau, "mirostat_eta": p.mirostat_eta}


def _update(inputs: Inputs, tokens: mx.array, logprob_at: Callable[[str], mx.array]) -> dict[str, mx.array]:
    mu, tau, eta = inputs["mirostat_mu"], inputs["mirostat_tau"], inputs["mirostat_eta"]
    return {"mirostat_mu": next_mu_on_device(mu, tau, eta, logprob_at(SPEC.name))}


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries: Sequence[Any]) -> MuRows:
    return MuRows([c if c is not None else 2.0 * p.mirostat_tau for p, c in zip(params, carries, strict=True)])


STAGE = Stage(SPEC, _apply, _columns, state=_state, needs_result=True, update=_update, update_rows=True)
