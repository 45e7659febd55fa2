"""Per-step inspection data for every stage of the chain, in one host transfer.

Each distinct distribution the chain made (the stages that ran; a stage that was the
identity for every row is its input again) gets its max, log Z, entropy and surviving
tokens, reduced once over all of them stacked; every candidate's logit is gathered once
from the stack. A group's rows are packed as :class:`PackLayout` says (only the stages
that ran), groups are laid one after another in one flat float32 array, and a step
costs exactly one copy to the host, where logprobs are finished with the device's own
float32 operations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
import numpy as np

from engine.api.events import Candidate, ChainValues
from engine.api.grammar import GrammarRecord
from engine.sampling.sampler import ChainResult, compiled_once
from engine.stages import STAGES
from engine.stages.base import exp
from engine.stages.grammar import STATISTICS, grammar_record

BLOCK = 128
"""Top candidates are found among the ``top_n`` blocks of this many tokens with the
largest maxima (every top-n token lies in one of them), so a step partitions a few
thousand values instead of the vocabulary: four times cheaper on the CPU."""
_STATS = ("max", "log_z", "entropy", "survivors")  # per distribution, per row


@dataclass(frozen=True)
class PackLayout:
    """Where a group's values sit in each of its packed rows (host and device agree on it).

    The distinct distributions of the chain (a stage that was the identity for every row
    repeats its input: one distribution) are stacked raw first, the last stage's second,
    then the others in chain order. A row is ``[token, stats [4, D], index [S], counts [S],
    logits [D, S]]``: each distribution's max, log Z, entropy and surviving tokens; the
    candidates' ids (``S = 2 * top_n + 1`` slots: the top of ``raw``, the top of the last
    stage, the drawn token), their penalty counts, and their logit in every distribution.
    A logprob is ``(logit - max) - log Z`` in float32 on the host, the same operations the
    device would do, so the numbers are the same to the bit.
    """

    chain: tuple[str, ...]
    """The group's stages (without ``raw``)."""
    sources: tuple[int, ...]
    """For each output (``raw``, then each stage), the first output with the same values."""
    top_n: int
    extras: tuple[str, ...] = ()
    """The stages that ran whose ``Stage.statistics`` close each row, in chain order."""

    @property
    def order(self) -> tuple[int, ...]:
        """The distinct outputs in stack order."""
        distinct = sorted(set(self.sources))
        last = self.sources[-1]
        return (0, *([last] if last else []), *(i for i in distinct if i not in (0, last)))

    @property
    def slots(self) -> int:
        return slots(self.top_n)

    @property
    def width(self) -> int:
        d, s = len(self.order), self.slots
        return 1 + len(_STATS) * d + 2 * s + d * s + sum(STAGES[n].statistics_width for n in self.extras)

    def extras_at(self, stage: str) -> int:
        """Where ``stage``'s figures start in a packed row."""
        at = self.width
        for name in reversed(self.extras):
            at -= STAGES[name].statistics_width
            if name == stage:
                return at
        raise KeyError(stage)

    def distribution(self, stage: str) -> int:
        """The stack index of the distribution after ``stage`` (``raw`` too)."""
        output = 0 if stage == "raw" else self.chain.index(stage) + 1
        return self.order.index(self.sources[output])

    def effect_pair(self, stage: str) -> tuple[int, int] | None:
        """The distributions before and after ``stage``, or None when it did not run."""
        if stage not in self.chain:
            return None
        i = self.chain.index(stage)
        before = "raw" if i == 0 else self.chain[i - 1]
        return self.distribution(before), self.distribution(stage)


def slots(top_n: int) -> int:
    return 2 * top_n + 1 if top_n > 0 else 1


def layout_of(result: ChainResult, top_n: int) -> PackLayout:
    return PackLayout(result.chain, tuple(result.sources()), top_n, extras_of(result.chain, result.aliases))


def extras_of(chain: Sequence[str], aliases: frozenset[str]) -> tuple[str, ...]:
    """The stages of ``chain`` that ran and pack figures of their own (``Stage.statistics``)."""
    return tuple(n for n in chain if n not in aliases and STAGES[n].statistics is not None)


def _blocks(values: mx.array) -> mx.array | None:
    """[..., V] -> [..., V / BLOCK, BLOCK], or None when V is not a multiple of ``BLOCK``."""
    vocab = values.shape[-1]
    return None if vocab % BLOCK else values.reshape(*values.shape[:-1], vocab // BLOCK, BLOCK)


def _sum(values: mx.array) -> mx.array:
    """[..., V] -> [...]. MLX's CPU backend sums a row in one pass, adding a tail of tiny
    probabilities to the top token's 1.0 one by one, and those under half its ulp are lost
    (1.2e-4 nats of log Z on a peaked 49,152-token step): there, by blocks of ``BLOCK``
    first, then the blocks. A GPU's reduction is a tree already, and a second one would
    cost a launch."""
    blocks = _blocks(values) if mx.default_device() == mx.cpu else None
    return mx.sum(values, axis=-1) if blocks is None else mx.sum(mx.sum(blocks, axis=-1), axis=-1)


def _largest(values: mx.array, n: int) -> mx.array:
    """The indices of the ``n`` largest of ``values`` along its last axis, in no order."""
    size = values.shape[-1]
    return mx.argpartition(values, kth=size - n, axis=-1)[..., size - n :]


def _top_indices(values: mx.array, n: int, blocks: mx.array | None, block_max: mx.array | None) -> mx.array:
    """[..., V] -> [..., n] int32: the ids of the ``n`` largest values, in no order.

    The top ``n`` values of a row lie in the ``n`` blocks with the largest maxima (a value
    outside them is beaten or tied by those ``n`` maxima), so a partition over the block
    maxima, then over the values of those blocks, finds them.
    """
    n = min(n, values.shape[-1])
    if blocks is None or block_max is None or n >= block_max.shape[-1]:
        return _largest(values, n).astype(mx.int32)
    best = _largest(block_max, n)
    inside = mx.take_along_axis(blocks, best[..., None], axis=-2).reshape(*values.shape[:-1], n * BLOCK)
    within = _largest(inside, n)
    block = mx.take_along_axis(best, within // BLOCK, axis=-1)
    return (block * BLOCK + within % BLOCK).astype(mx.int32)


def pack_outputs(
    layout: PackLayout, outputs: Sequence[mx.array], tokens: mx.array, counts, inputs: Mapping[str, mx.array]
) -> mx.array:
    """[B, layout.width] float32: the inspection data of one group (pure; compiled with the
    chain by ``engine.sampling.step.compiled_step``, or alone by :func:`pack_step`).

    The statistics of every distribution are reduced once over the stacked distributions
    ([D, B, V]: one max by blocks, one exp, three sums), and every candidate's logit is
    gathered once from the stack: a handful of kernels however long the chain, which is
    what a step costs on a GPU.
    """
    stack = mx.stack([outputs[i] for i in layout.order])  # [D, B, V]
    batch = tokens.shape[0]
    blocks = _blocks(stack)
    block_max = None if blocks is None else mx.max(blocks, axis=-1)  # [D, B, V / BLOCK]
    top = mx.max(stack if block_max is None else block_max, axis=-1, keepdims=True)
    shifted = stack - top
    e = exp(shifted)
    z = _sum(e)
    log_z = mx.log(z)
    h = mx.maximum(log_z - _sum(mx.where(e > 0, e * shifted, 0.0)) / z, 0.0)
    survivors = mx.sum(mx.where(stack > float("-inf"), 1.0, 0.0), axis=-1)  # float32: no cast to pack
    chosen = tokens[:, None].astype(mx.int32)
    if layout.top_n > 0:
        two = min(2, len(layout.order))  # raw, the last
        tops = _top_indices(
            stack[:two],
            layout.top_n,
            None if blocks is None else blocks[:two],
            None if block_max is None else block_max[:two],
        )
        tops = mx.broadcast_to(tops, (2, *tops.shape[1:]))  # the last is raw when nothing changed it
        index = mx.concatenate([tops.transpose(1, 0, 2).reshape(batch, -1), chosen], axis=1)
    else:
        index = chosen
    logits = mx.take_along_axis(stack, mx.broadcast_to(index[None], (stack.shape[0], *index.shape)), axis=-1)
    if counts.ndim == 2:
        counted = mx.take_along_axis(counts, index, axis=-1).astype(mx.float32)
    else:
        counted = mx.zeros(index.shape, mx.float32)
    extras = []
    for name in layout.extras:
        i = layout.chain.index(name)  # outputs[i] entered it
        extras.append(STAGES[name].statistics(outputs[i], outputs[0], inputs))
    return mx.concatenate(
        [
            tokens[:, None].astype(mx.float32),
            *(stat.T for stat in (top[..., 0], log_z, h, survivors)),  # [B, D] each
            index.astype(mx.float32),
            counted,
            logits.transpose(1, 0, 2).reshape(batch, -1),
            *extras,
        ],
        axis=1,
    )


def pack_step(
    result: ChainResult, counts: mx.array | None, top_n: int, inputs: Mapping[str, mx.array] | None = None
) -> mx.array:
    """[B, width] float32 inspection data of a chain's result (see :class:`PackLayout`),
    compiled once per layout; ``inputs``: the step's, for stages that pack figures of their own."""
    layout = layout_of(result, top_n)
    fn = compiled_once(("pack", layout, counts is not None), lambda: partial(pack_outputs, layout))
    return fn(result.outputs, result.tokens, counts if counts is not None else mx.array(0.0), dict(inputs or {}))


@dataclass(frozen=True, slots=True)
class RowInspection(ChainValues):
    token_id: int
    chain: tuple[str, ...]
    logprobs: tuple[float, ...]
    entropies: tuple[float, ...]
    survivors: tuple[int, ...]
    top: tuple[Candidate, ...]
    grammar: GrammarRecord | None = None
    """What the grammar did, where it ran for the row (``accepting`` and ``left`` are the
    state's: :meth:`engine.sampling.batch.SamplingBatch.with_state` adds them)."""


def unpack_row(
    packed: np.ndarray,
    layout: PackLayout,
    row_top_n: int,
    chain: Sequence[str],
    text_of: Callable[[int], str],
) -> RowInspection:
    """Host side: one row of :func:`pack_outputs`, for a row whose stages were ``chain``
    (without ``raw``; a subset of the group's); candidates deduplicated and sorted by their
    last-stage logprob."""
    chain = ("raw", *chain)
    d, n_slots, top_n = len(layout.order), layout.slots, layout.top_n
    stats = packed[1 : 1 + len(_STATS) * d].reshape(len(_STATS), d)
    at = 1 + len(_STATS) * d
    index = packed[at : at + n_slots].astype(np.int64)
    counts = packed[at + n_slots : at + 2 * n_slots]
    logits = packed[at + 2 * n_slots : at + 2 * n_slots + d * n_slots].reshape(d, n_slots)
    lps = (logits - stats[0][:, None]) - stats[1][:, None]  # float32, as on the device
    rows = [layout.distribution(name) for name in chain]
    stage_values = lps[rows]  # [len(chain), S]
    effects = []
    for stage in ("bias", "penalties", "dry"):
        pair = layout.effect_pair(stage)
        with np.errstate(invalid="ignore"):  # a token removed before the stage: -inf - -inf is NaN, as on a device
            effects.append(logits[pair[1]] - logits[pair[0]] if pair else np.zeros(n_slots, np.float32))
    extra = np.stack([logits[0], *effects[:2], counts, effects[2]])
    by_id: dict[int, int] = {}
    for slot in _wanted_slots(logits[0], stage_values[-1], top_n, row_top_n, n_slots):
        by_id.setdefault(int(index[slot]), slot)
    top = tuple(
        sorted(
            (_candidate(int(index[s]), extra[:, s], stage_values[:, s], chain, text_of) for s in by_id.values()),
            key=lambda c: (-c.logprob, -c.raw_logprob),
        )
    )
    grammar = None
    if "grammar" in chain:
        at = layout.extras_at("grammar")
        entering, _ = layout.effect_pair("grammar")

        def log_partition(d: int) -> float:  # log Σ exp of distribution d's logits: its max + log Z
            return float(stats[0][d]) + float(stats[1][d])

        grammar = grammar_record(packed[at : at + len(STATISTICS)], log_partition(entering), log_partition(0))
    return RowInspection(
        token_id=int(packed[0]),
        chain=chain,
        logprobs=tuple(float(v) for v in stage_values[:, n_slots - 1]),
        entropies=tuple(_clean_entropy(float(stats[2][r])) for r in rows),
        survivors=tuple(int(stats[3][r]) for r in rows),
        top=top,
        grammar=grammar,
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
