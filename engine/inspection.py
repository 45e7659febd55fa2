"""Per-step inspection data for every stage of the chain, in one host transfer.

For each stage that ran, the batch's logits after it become logprobs (one log-sum-exp
per stage), an entropy and a surviving-token count; each candidate's logprob is
gathered from every stage. Everything is packed into one float32 array with a slot per
canonical stage name (``STAGE_NAMES``; NaN where the stage did not run), so groups of
rows with different chains concatenate, and a step costs exactly one copy to the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
import numpy as np

from engine.events import Candidate, ChainValues
from engine.params import STAGE_NAMES
from engine.sampler import ChainResult

N_STAGES = len(STAGE_NAMES)
_EXTRA = ("raw_logit", "bias", "penalty", "count", "dry")  # per candidate, before the per-stage logprobs
_PER_SLOT = len(_EXTRA) + N_STAGES
_HEAD = 1 + 2 * N_STAGES  # token, entropies, survivors


def entropy(logprobs: mx.array) -> mx.array:
    """[B, V] logprobs -> [B] entropy in nats; removed (-inf) tokens contribute 0."""
    terms = mx.where(logprobs > float("-inf"), mx.exp(logprobs) * logprobs, 0.0)
    return -mx.sum(terms, axis=-1)


def _distribution_stats(
    logits: mx.array, parent: tuple[mx.array, mx.array, mx.array] | None = None
) -> tuple[tuple[mx.array, mx.array, mx.array, mx.array], tuple[mx.array, mx.array, mx.array]]:
    """``((max [B, 1], log Z [B, 1], entropy [B], surviving tokens [B]), (max, shift, exp))``
    with at most one exp over [B, V]: a logprob is ``(l - max) - log Z``, exact to float32
    even for large logits (``l - lse`` carries an ulp of the largest logit).

    ``H = log Z - sum(e * s) / Z`` with ``s = l - max`` and ``e = exp(s)``: exp is the
    costly pass on the CPU backend, so it is taken once (and the shift keeps the
    subtraction well conditioned). ``parent`` (the previous distribution's max, shift and
    exp) is reused when these logits are the parent's with tokens removed and its most
    likely token kept (:data:`KEEPS_TOP`): the same max, so the same shift and exp values
    on the survivors, and no exp at all.
    """
    finite = logits > float("-inf")
    if parent is None:
        top = mx.max(logits, axis=-1, keepdims=True)
        shifted = logits - top
        e = mx.exp(shifted)
    else:
        top, shifted, e = parent
        e = mx.where(finite, e, 0.0)
    z = mx.sum(e, axis=-1, keepdims=True)
    log_z = mx.log(z)
    h = log_z[:, 0] - mx.sum(mx.where(e > 0, e * shifted, 0.0), axis=-1) / z[:, 0]
    survivors = mx.sum(finite, axis=-1).astype(mx.float32)
    return (top, log_z, mx.maximum(h, 0.0), survivors), (top, shifted, e)


KEEPS_TOP = frozenset({"top_k", "top_p", "min_p", "top_n_sigma"})
"""Stages whose output is their input with tokens removed, the most likely one always kept."""


def _top_indices(values: mx.array, n: int) -> mx.array:
    n = min(n, values.shape[-1])
    return mx.argpartition(-values, kth=n - 1, axis=-1)[:, :n]


def slots(top_n: int) -> int:
    return 2 * top_n + 1 if top_n > 0 else 1


def pack_step(result: ChainResult, counts: mx.array | None, top_n: int) -> mx.array:
    """[B, _HEAD + S * (1 + _PER_SLOT)] float32, S = 2 * top_n + 1 candidate slots:
    the top ``top_n`` of ``raw``, of the last stage, and the drawn token. Each distinct
    distribution (a stage that was the identity for every row repeats its input) is
    normalized once. Compiled once per chain shape (its stages, which outputs repeat an
    input, ``top_n``, whether counts are reported): fused kernels instead of a hundred
    small ones, which is what a step costs on a GPU."""
    key = (result.chain, tuple(result.sources()), top_n, counts is not None)
    fn = _PACKERS.get(key)
    if fn is None:
        fn = _PACKERS[key] = mx.compile(partial(_pack, result.chain, key[1], top_n))
        while len(_PACKERS) > 64:
            _PACKERS.pop(next(iter(_PACKERS)))
    return fn(result.outputs, result.tokens, counts if counts is not None else mx.array(0.0))


_PACKERS: dict[tuple, Callable] = {}


def _pack(
    chain: tuple[str, ...], sources: tuple[int, ...], top_n: int, outputs: list[mx.array], tokens: mx.array, counts
) -> mx.array:
    raw, last = outputs[0], outputs[sources[-1]]
    batch = tokens.shape[0]
    chosen = tokens[:, None].astype(mx.int32)
    index = chosen
    if top_n > 0:
        tops = [_top_indices(raw, top_n)]
        tops.append(tops[0] if sources[-1] == 0 else _top_indices(last, top_n))
        index = mx.concatenate([*tops, chosen], axis=1)
    width = index.shape[1]
    nan_row = mx.full((batch,), math.nan, mx.float32)
    nan_slots = mx.full((batch, width), math.nan, mx.float32)
    zeros = mx.zeros((batch, width), mx.float32)

    def gather(values: mx.array) -> mx.array:
        return mx.take_along_axis(values, index, axis=-1)

    per_source: dict[int, tuple[mx.array, mx.array, mx.array]] = {}
    exps: dict[int, tuple[mx.array, mx.array, mx.array]] = {}
    for i in sorted(set(sources)):  # each distinct distribution in chain order, its parent first
        parent = exps.get(sources[i - 1]) if i > 0 and chain[i - 1] in KEEPS_TOP else None
        (top, log_z, h, n), exps[i] = _distribution_stats(outputs[i], parent)
        per_source[i] = (h, n, (gather(outputs[i]) - top) - log_z)
    entropies, survivors, stage_lps = [], [], []
    for name in STAGE_NAMES:
        position = 0 if name == "raw" else (chain.index(name) + 1 if name in chain else None)
        if position is None:
            entropies.append(nan_row)
            survivors.append(nan_row)
            stage_lps.append(nan_slots)
            continue
        h, n, lps = per_source[sources[position]]
        entropies.append(h)
        survivors.append(n)
        stage_lps.append(lps)
    extra = [
        gather(raw),
        _effect(chain, outputs, "bias", gather, zeros),
        _effect(chain, outputs, "penalties", gather, zeros),
        gather(counts).astype(mx.float32) if counts.ndim == 2 else zeros,
        _effect(chain, outputs, "dry", gather, zeros),
    ]
    head = mx.stack([tokens.astype(mx.float32), *entropies, *survivors], axis=1)
    return mx.concatenate([head, index.astype(mx.float32), *extra, *stage_lps], axis=1)


def _effect(chain: tuple[str, ...], outputs: list[mx.array], stage: str, gather, zeros: mx.array) -> mx.array:
    """How much ``stage`` changed each candidate's logit (0 when it did not run)."""
    if stage not in chain:
        return zeros
    i = chain.index(stage)
    return gather(outputs[i + 1] - outputs[i])


@dataclass(frozen=True, slots=True)
class RowInspection(ChainValues):
    token_id: int
    chain: tuple[str, ...]
    logprobs: tuple[float, ...]
    entropies: tuple[float, ...]
    survivors: tuple[int, ...]
    top: tuple[Candidate, ...]


def unpack_row(
    packed: np.ndarray,
    top_n: int,
    row_top_n: int,
    chain: Sequence[str],
    text_of: Callable[[int], str],
) -> RowInspection:
    """Host side: one row of :func:`pack_step`, for a row whose stages were ``chain``
    (without ``raw``); candidates deduplicated and sorted by their last-stage logprob."""
    chain = ("raw", *chain)
    columns = [STAGE_NAMES.index(name) for name in chain]
    n_slots = slots(top_n)
    index = packed[_HEAD : _HEAD + n_slots].astype(np.int64)
    values = packed[_HEAD + n_slots :].reshape(_PER_SLOT, n_slots)
    stage_values = values[len(_EXTRA) :][columns]  # [len(chain), S]
    by_id: dict[int, int] = {}
    for slot in _wanted_slots(values[0], stage_values[-1], top_n, row_top_n, n_slots):
        by_id.setdefault(int(index[slot]), slot)
    top = tuple(
        sorted(
            (_candidate(int(index[s]), values[:, s], stage_values[:, s], chain, text_of) for s in by_id.values()),
            key=lambda c: (-c.logprob, -c.raw_logprob),
        )
    )
    entropies = packed[1 : 1 + N_STAGES][columns]
    survivors = packed[1 + N_STAGES : _HEAD][columns]
    return RowInspection(
        token_id=int(packed[0]),
        chain=chain,
        logprobs=tuple(float(v) for v in stage_values[:, n_slots - 1]),
        entropies=tuple(_clean_entropy(float(e)) for e in entropies),
        survivors=tuple(int(s) for s in survivors),
        top=top,
    )


def _clean_entropy(value: float) -> float:
    # A point mass gives -0.0 or a rounding error below zero; entropy is never negative.
    return value if value > 0.0 else 0.0


def _wanted_slots(raw_logits: np.ndarray, last: np.ndarray, top_n: int, row_top_n: int, n_slots: int) -> list[int]:
    """This row's top ``row_top_n`` of raw and of the last stage (finite only), then the chosen slot."""
    if top_n == 0 or row_top_n == 0:
        return [n_slots - 1]
    raw_slots = np.argsort(-raw_logits[:top_n], kind="stable")[:row_top_n]
    last_values = last[top_n : 2 * top_n]
    last_order = np.argsort(-last_values, kind="stable")[:row_top_n]
    last_slots = [top_n + int(s) for s in last_order if np.isfinite(last_values[s])]
    return [int(s) for s in raw_slots] + last_slots + [n_slots - 1]


def _candidate(
    token_id: int, extra: np.ndarray, logprobs: np.ndarray, chain: tuple[str, ...], text_of: Callable[[int], str]
) -> Candidate:
    removed = np.flatnonzero(np.isneginf(logprobs))
    return Candidate(
        token_id=token_id,
        text=text_of(token_id),
        raw_logit=float(extra[0]),
        logprobs=tuple(float(v) for v in logprobs),
        removed_by=chain[int(removed[0])] if removed.size else None,
        bias=float(extra[1]),
        penalty=float(extra[2]),
        count=int(extra[3]),
        dry=float(extra[4]) if "dry" in chain else None,
    )


def to_host(packed: mx.array) -> np.ndarray:
    """The one device-to-host copy of a step (already float32).

    ``mx.eval`` first: it releases the GIL while the step computes, whereas the
    implicit evaluation inside ``np.array`` holds it, freezing the GUI thread.
    """
    mx.eval(packed)
    return np.array(packed, copy=False)
