"""Per-step inspection data: logprobs, entropies and candidate sets, in one host transfer.

All quantities are computed on the device in float32 (bf16 / f16 logits were
promoted before the first stage) and packed into a single array, so a step
costs exactly one device-to-host copy for the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from engine.events import Candidate
from engine.sampler import PipelineResult

# Fields gathered for each candidate slot, in pack order.
_FIELDS = ("raw_logit", "raw_logprob", "penalized_logprob", "logprob", "bias", "penalty", "count")


def log_softmax(logits: mx.array) -> mx.array:
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def entropy(logprobs: mx.array) -> mx.array:
    """[B, V] logprobs -> [B] entropy in nats; -inf entries contribute 0."""
    terms = mx.where(mx.isinf(logprobs), 0.0, mx.exp(logprobs) * logprobs)
    return -mx.sum(terms, axis=-1)


def _top_indices(values: mx.array, n: int) -> mx.array:
    vocab = values.shape[-1]
    n = min(n, vocab)
    return mx.argpartition(-values, kth=n - 1, axis=-1)[:, :n]


def pack_step(result: PipelineResult, counts: mx.array | None, top_n: int) -> mx.array:
    """[B, 3 + S * (1 + len(_FIELDS))] float32 where S = 2 * top_n + 1 candidate slots."""
    raw_lp = log_softmax(result.raw)
    pen_lp = log_softmax(result.penalized)
    fin_lp = log_softmax(result.final)
    chosen = result.tokens[:, None]
    parts = [chosen]
    if top_n > 0:
        parts = [_top_indices(result.raw, top_n), _top_indices(result.final, top_n), chosen]
    index = mx.concatenate([p.astype(mx.int32) for p in parts], axis=1)  # [B, S]

    def gather(values: mx.array) -> mx.array:
        return mx.take_along_axis(values, index, axis=-1)

    zeros = mx.zeros(index.shape, mx.float32)
    fields = [
        gather(result.raw),
        gather(raw_lp),
        gather(pen_lp),
        gather(fin_lp),
        gather(result.biased - result.raw),
        gather(result.penalized - result.biased),
        gather(counts).astype(mx.float32) if counts is not None else zeros,
    ]
    scalars = mx.stack([result.tokens.astype(mx.float32), entropy(raw_lp), entropy(fin_lp)], axis=1)
    return mx.concatenate([scalars, index.astype(mx.float32), *fields], axis=1)


@dataclass(frozen=True, slots=True)
class RowInspection:
    token_id: int
    entropy_raw: float
    entropy: float
    raw_logprob: float
    penalized_logprob: float
    logprob: float
    top: tuple[Candidate, ...]


def unpack_row(packed: np.ndarray, top_n: int, row_top_n: int, text_of: Callable[[int], str]) -> RowInspection:
    """Host side: one row of :func:`pack_step`, its candidates deduplicated and sorted.

    ``row_top_n`` <= ``top_n`` is this row's own ``top_logprobs``.
    """
    slots = 2 * top_n + 1 if top_n > 0 else 1
    token_id = int(packed[0])
    index = packed[3 : 3 + slots].astype(np.int64)
    values = packed[3 + slots :].reshape(len(_FIELDS), slots)
    by_id: dict[int, int] = {}
    wanted = _wanted_slots(values, top_n, row_top_n, slots)
    for slot in wanted:
        by_id.setdefault(int(index[slot]), slot)
    chosen_slot = slots - 1
    top = tuple(
        sorted(
            (_candidate(int(index[s]), values[:, s], text_of) for s in by_id.values()),
            key=lambda c: (-c.logprob, -c.raw_logprob),
        )
    )
    return RowInspection(
        token_id=token_id,
        entropy_raw=float(packed[1]),
        entropy=float(packed[2]),
        raw_logprob=float(values[1, chosen_slot]),
        penalized_logprob=float(values[2, chosen_slot]),
        logprob=float(values[3, chosen_slot]),
        top=top,
    )


def _wanted_slots(values: np.ndarray, top_n: int, row_top_n: int, slots: int) -> list[int]:
    """This row's top ``row_top_n`` of raw and of final (finite only), then the chosen slot."""
    if top_n == 0 or row_top_n == 0:
        return [slots - 1]
    raw_slots = np.argsort(-values[0, :top_n], kind="stable")[:row_top_n]
    fin_values = values[3, top_n : 2 * top_n]
    fin_order = np.argsort(-fin_values, kind="stable")[:row_top_n]
    fin_slots = [top_n + int(s) for s in fin_order if np.isfinite(fin_values[s])]
    return [int(s) for s in raw_slots] + fin_slots + [slots - 1]


def _candidate(token_id: int, v: np.ndarray, text_of: Callable[[int], str]) -> Candidate:
    return Candidate(
        token_id=token_id,
        text=text_of(token_id),
        raw_logit=float(v[0]),
        raw_logprob=float(v[1]),
        penalized_logprob=float(v[2]),
        logprob=float(v[3]),
        bias=float(v[4]),
        penalty=float(v[5]),
        count=int(v[6]),
    )


def to_host(packed: mx.array) -> np.ndarray:
    """The one device-to-host copy of a step (already float32).

    ``mx.eval`` first: it releases the GIL while the step computes, whereas the
    implicit evaluation inside ``np.array`` holds it, freezing the GUI thread.
    """
    mx.eval(packed)
    return np.array(packed, copy=False)
