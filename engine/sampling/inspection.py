"""Per-step inspection data for every stage of the chain, in one host transfer.

Each distinct distribution the chain made (the stages that ran; a stage that was the
identity for every row is its input again) gets its max, its sums Z = Σ exp(x - max) and
Σ exp(x - max)·(x - max), and its surviving tokens, reduced once over all of them stacked;
every candidate's logit is gathered once from the stack. A group's rows are packed as
:class:`PackLayout` says (only the stages that ran), groups are laid one after another in
one flat float32 array, and a step costs exactly one copy to the host, where log Z, the
entropies and the logprobs are finished in float32 (a few values a row: two kernels fewer
on the device, each a launch on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache, partial

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
_STATS = ("max", "z", "weighted", "survivors")  # per distribution, per row


@dataclass(frozen=True)
class PackLayout:
    """Where a group's values sit in each of its packed rows (host and device agree on it).

    The distinct distributions of the chain (a stage that was the identity for every row
    repeats its input: one distribution) are stacked raw first, the last stage's second,
    then the others in chain order. A row is ``[stats [4, D], index [S], counts [S], logits
    [D, S]]``: each distribution's max, Z = Σ e with e = exp(x - max), Σ e·(x - max) and
    surviving tokens; the candidates' ids (``S = 2 * top_n + 1`` slots: the top of ``raw``,
    the top of the last stage, the drawn token, which is how the host knows the token),
    their penalty counts, and their logit in every distribution. On the host, in float32:
    log Z = log(Z), the entropy ``max(log Z - Σ/Z, 0)`` and a logprob ``(logit - max) -
    log Z``. The ids and the counts are int32 bits in the float32 row (``mx.view``: a cast
    would be a kernel each; the host reads them back with ``.view(np.int32)``).
    """

    chain: tuple[str, ...]
    """The group's stages (without ``raw``)."""
    sources: tuple[int, ...]
    """For each output (``raw``, then each stage), the first output with the same values."""
    top_n: int
    extras: tuple[str, ...] = ()
    """The stages that ran whose ``Stage.statistics`` close each row, in chain order."""

    @cached_property  # read for every row of every step
    def order(self) -> tuple[int, ...]:
        """The distinct outputs in stack order."""
        distinct = sorted(set(self.sources))
        last = self.sources[-1]
        return (0, *([last] if last else []), *(i for i in distinct if i not in (0, last)))

    @property
    def slots(self) -> int:
        return slots(self.top_n)

    @cached_property
    def width(self) -> int:
        d, s = len(self.order), self.slots
        return len(_STATS) * d + 2 * s + d * s + sum(STAGES[n].statistics_width for n in self.extras)

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
        return _int32(_largest(values, n))
    best = _int32(_largest(block_max, n))
    shape = (*values.shape[:-1], n * BLOCK)
    inside = mx.take_along_axis(blocks, best[..., None], axis=-2).reshape(shape)
    ids = (best[..., None] * BLOCK + _offsets()).reshape(shape)  # the ids of ``inside``
    return mx.take_along_axis(ids, _largest(inside, n), axis=-1)


@lru_cache(maxsize=1)
def _offsets() -> mx.array:
    # Evaluated once: a compiled step takes it as a constant, where an arange would be a kernel.
    offsets = mx.arange(BLOCK, dtype=mx.int32)
    mx.eval(offsets)
    return offsets


def _int32(values: mx.array) -> mx.array:
    """``values`` (int32, or uint32 below 2**31: token ids, counts) as int32, a view."""
    return values if values.dtype == mx.int32 else mx.view(values, mx.int32)


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
    e = exp(stack - top)
    z = _sum(e)
    # stack + (-top) is stack - top to the bit, written apart so that MLX's compile does not
    # merge the two and keep the shifted stack as a kernel of its own for both to read.
    weighted = _sum(mx.where(e > 0, e * (stack + -top), 0.0))
    survivors = mx.sum(mx.where(stack > float("-inf"), 1.0, 0.0), axis=-1)  # float32: no cast to pack
    chosen = _int32(tokens)[:, None]
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
        counted = mx.take_along_axis(_int32(counts), index, axis=-1)
    else:
        counted = mx.zeros(index.shape, mx.int32)
    extras = []
    for name in layout.extras:
        i = layout.chain.index(name)  # outputs[i] entered it
        extras.append(STAGES[name].statistics(outputs[i], outputs[0], inputs))
    return mx.concatenate(
        [
            *(stat.T for stat in (top[..., 0], z, weighted, survivors)),  # [B, D] each
            mx.view(index, mx.float32),
            mx.view(counted, mx.float32),
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


@dataclass(frozen=True, slots=True)
class _RowPlan:
    """What :func:`unpack_row` reads where, for one layout and row chain (made once)."""

    chain: tuple[str, ...]
    rows: tuple[int, ...]
    effects: tuple[tuple[int, int] | None, ...]  # bias, penalties, dry
    grammar: tuple[int, int] | None  # where its figures start, the distribution entering it


@lru_cache(maxsize=256)
def _row_plan(layout: PackLayout, chain: tuple[str, ...]) -> _RowPlan:
    chain = ("raw", *chain)
    rows = tuple(layout.distribution(name) for name in chain)
    effects = tuple(layout.effect_pair(stage) for stage in ("bias", "penalties", "dry"))
    grammar = None
    if "grammar" in chain:
        entering, _ = layout.effect_pair("grammar")
        grammar = (layout.extras_at("grammar"), entering)
    return _RowPlan(chain, rows, effects, grammar)


def unpack_row(
    packed: np.ndarray,
    layout: PackLayout,
    row_top_n: int,
    chain: Sequence[str],
    text_of: Callable[[int], str],
) -> RowInspection:
    """Host side: one row of :func:`pack_outputs`, for a row whose stages were ``chain``
    (without ``raw``; a subset of the group's); candidates deduplicated and sorted by their
    last-stage logprob. :func:`unpack_rows` of one row."""
    return unpack_rows(packed[None, :], layout, [row_top_n], [tuple(chain)], text_of)[0]


def unpack_rows(
    block: np.ndarray,
    layout: PackLayout,
    row_top_ns: Sequence[int],
    chains: Sequence[tuple[str, ...]],
    text_of: Callable[[int], str],
) -> list[RowInspection]:
    """Host side: the rows ``block`` [R, layout.width] of one group, row ``r`` with its own
    ``row_top_ns[r]`` and ``chains[r]`` (see :func:`unpack_row`).

    Every step of every row comes through here, on the host while the device runs the next
    step (a launch-bound GPU step waits on this work): the group's rows are finished
    together, a NumPy call for all of them and one ``tolist`` to take the values out, so
    that what is left per row is Python building its candidates. Logprobs, log Z and the
    entropies in float32, as the device would compute them."""
    n_rows = block.shape[0]
    d, n_slots, top_n = len(layout.order), layout.slots, layout.top_n
    stats = block[:, : len(_STATS) * d].reshape(n_rows, len(_STATS), d)
    at = len(_STATS) * d
    logits = block[:, at + 2 * n_slots : at + 2 * n_slots + d * n_slots].reshape(n_rows, d, n_slots)
    log_z = np.log(stats[:, 1])  # [R, D]
    lps = (logits - stats[:, 0, :, None]) - log_z[:, :, None]  # [R, D, S]
    entropy = np.maximum(log_z - stats[:, 2] / stats[:, 1], np.float32(0.0)).tolist()
    survivors = stats[:, 3].tolist()
    ids = np.ascontiguousarray(block[:, at : at + n_slots]).view(np.int32).tolist()
    counts = np.ascontiguousarray(block[:, at + n_slots : at + 2 * n_slots]).view(np.int32).tolist()
    raw = logits[:, 0].tolist()
    raw_order = np.argsort(-logits[:, 0, :top_n], axis=-1, kind="stable").tolist()
    with np.errstate(invalid="ignore"):  # a token removed before the stage: -inf - -inf is NaN, as on a device
        pairs = [layout.effect_pair(stage) for stage in ("bias", "penalties", "dry")]
        effects = [None if pair is None else (logits[:, pair[1]] - logits[:, pair[0]]).tolist() for pair in pairs]
    # Each row's own chain, as distributions of the stack: padded with its last to the
    # longest, so that one gather serves rows of any chains (a pad repeats the last
    # distribution, so the first stage that removed a token is the same).
    plans = [_row_plan(layout, tuple(chain)) for chain in chains]
    widest = max(len(plan.rows) for plan in plans)
    index = np.array([plan.rows + (plan.rows[-1],) * (widest - len(plan.rows)) for plan in plans])
    values = np.take_along_axis(lps, index[:, :, None], axis=1)  # [R, C, S]
    removed = np.isneginf(values)
    first_removed = np.where(removed.any(axis=1), removed.argmax(axis=1), -1).tolist()  # [R, S]
    last = values[np.arange(n_rows), np.array([len(plan.rows) - 1 for plan in plans]), top_n : 2 * top_n]
    last_order = np.argsort(-last, axis=-1, kind="stable")
    last_finite = np.isfinite(np.take_along_axis(last, last_order, axis=-1)).tolist()
    last_order = last_order.tolist()
    by_slot = values.transpose(0, 2, 1).tolist()  # [R, S, C]
    out = []
    for r, plan in enumerate(plans):
        n = len(plan.rows)
        slots = by_slot[r] if n == widest else [lps_of_slot[:n] for lps_of_slot in by_slot[r]]
        wanted = _wanted(raw_order[r], last_order[r], last_finite[r], top_n, row_top_ns[r], n_slots)
        out.append(
            _row(
                plan,
                ids[r][n_slots - 1],  # the drawn token: the last slot
                [entropy[r][i] for i in plan.rows],
                [survivors[r][i] for i in plan.rows],
                _candidates(plan, wanted, ids[r], slots, first_removed[r], raw[r], counts[r], effects, r, text_of),
                slots[n_slots - 1],
                _grammar(plan, block[r], stats[r]),
            )
        )
    return out


def _wanted(
    raw_order: list[int], last_order: list[int], finite: list[bool], top_n: int, row_top_n: int, n_slots: int
) -> list[int]:
    """A row's top ``row_top_n`` of raw and of the last stage (finite only), then the chosen slot."""
    if top_n == 0 or row_top_n == 0:
        return [n_slots - 1]
    last = [top_n + s for s, ok in zip(last_order[:row_top_n], finite[:row_top_n], strict=True) if ok]
    return raw_order[:row_top_n] + last + [n_slots - 1]


def _candidates(
    plan: _RowPlan,
    wanted: list[int],
    ids: list[int],
    by_slot: list[list[float]],
    first_removed: list[int],
    raw: list[float],
    counts: list[int],
    effects: list[list[list[float]] | None],
    r: int,
    text_of: Callable[[int], str],
) -> tuple[Candidate, ...]:
    by_id: dict[int, int] = {}
    for slot in wanted:
        by_id.setdefault(ids[slot], slot)
    bias, penalty, dry = (e[r] if e is not None else None for e in effects)
    has_dry = "dry" in plan.chain
    top = [
        Candidate(
            token_id=ids[s],
            text=text_of(ids[s]),
            raw_logit=raw[s],
            logprobs=tuple(by_slot[s]),
            removed_by=plan.chain[first_removed[s]] if first_removed[s] >= 0 else None,
            bias=bias[s] if bias is not None else 0.0,
            penalty=penalty[s] if penalty is not None else 0.0,
            count=counts[s],
            dry=(dry[s] if dry is not None else 0.0) if has_dry else None,
        )
        for s in by_id.values()
    ]
    top.sort(key=lambda c: (-c.logprobs[-1], -c.logprobs[0]))
    return tuple(top)


def _grammar(plan: _RowPlan, row: np.ndarray, stats: np.ndarray) -> GrammarRecord | None:
    if plan.grammar is None:
        return None
    at, entering = plan.grammar

    def log_partition(d: int) -> float:  # log Σ exp of distribution d's logits: its max + log Z
        return float(stats[0][d]) + float(np.log(stats[1][d]))

    return grammar_record(row[at : at + len(STATISTICS)], log_partition(entering), log_partition(0))


def _row(
    plan: _RowPlan,
    token: int,
    entropies: list[float],
    survivors: list[float],
    top: tuple[Candidate, ...],
    chosen_logprobs: list[float],
    grammar: GrammarRecord | None,
) -> RowInspection:
    return RowInspection(
        token_id=token,
        chain=plan.chain,
        logprobs=tuple(chosen_logprobs),
        entropies=tuple(_clean_entropy(v) for v in entropies),
        survivors=tuple(int(v) for v in survivors),
        top=top,
        grammar=grammar,
    )


def _clean_entropy(value: float) -> float:
    # A point mass gives -0.0 or a rounding error below zero; entropy is never negative.
    return value if value > 0.0 else 0.0


def to_host(packed: mx.array) -> np.ndarray:
    """The one device-to-host copy of a step (already float32).

    ``mx.eval`` first: it releases the GIL while the step computes, whereas the
    implicit evaluation inside ``np.array`` holds it, freezing the GUI thread.
    """
    mx.eval(packed)
    return np.array(packed, copy=False)
