"""The host side of a step's inspection: the packed rows (``engine.sampling.inspection``)
finished into each row's :class:`RowInspection` and its candidates.

Every step of every row comes through here, on the host while the device runs the next
step, and a launch-bound GPU step waits on this work: a group's rows are finished
together, a NumPy call for all of them and one ``tolist`` a quantity, so that what is left
per row is Python building its candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.events import Candidate, ChainValues, TokenStep
from engine.api.grammar import GrammarRecord
from engine.api.params import SamplingParams
from engine.sampling.inspection import STATS, UNTRUSTED_Z, PackLayout
from engine.stages.grammar import STATISTICS, grammar_record


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

    def step(
        self, request_id: int, index: int, position: int, text: str, piece: str, params: SamplingParams, **more: Any
    ) -> TokenStep:
        """The token's ``TokenStep``: this inspection, and where and what the token is
        (``more``: ``forced``, ``rank``, ``phase``); the one place a step is built from a
        row, for a generated token (``engine.runtime.requests``) and a scored one
        (``engine.analysis.score``)."""
        return TokenStep(
            request_id=request_id,
            index=index,
            position=position,
            token_id=self.token_id,
            text=text,
            piece=piece,
            chain=self.chain,
            logprobs=self.logprobs,
            entropies=self.entropies,
            survivors=self.survivors,
            top=self.top,
            params=params,
            grammar=self.grammar,
            **more,
        )


@dataclass(frozen=True, slots=True)
class _RowPlan:
    """What :func:`unpack_row` reads where, for one layout and row chain (made once)."""

    chain: tuple[str, ...]
    rows: tuple[int, ...]
    grammar: tuple[int, int] | None  # where its figures start, the distribution entering it


@lru_cache(maxsize=256)
def _row_plan(layout: PackLayout, chain: tuple[str, ...]) -> _RowPlan:
    chain = ("raw", *chain)
    rows = tuple(layout.distribution(name) for name in chain)
    grammar = None
    if "grammar" in chain:
        entering, _ = layout.effect_pair("grammar")
        grammar = (layout.extras_at("grammar"), entering)
    return _RowPlan(chain, rows, grammar)


@lru_cache(maxsize=256)
def _effect_pairs(layout: PackLayout) -> tuple[tuple[int, int] | None, ...]:
    """The distributions before and after ``bias``, ``penalties`` and ``dry`` (None: it did not run)."""
    return tuple(layout.effect_pair(stage) for stage in ("bias", "penalties", "dry"))


def untrusted(layout: PackLayout, block: np.ndarray) -> bool:
    """Whether a row of ``block`` ([R, layout.width] on the host) holds a bias distribution's
    Z derived from raw's (``engine.sampling.inspection``) too small to trust. A Z over the
    distribution's own max is at least 1: only a derived one is ever under ``UNTRUSTED_Z``."""
    return layout.bias_z is not None and bool((block[:, layout.bias_z] < UNTRUSTED_Z).any())


CountOf = Callable[[int], int]
"""A token's count in its row's penalty window before the step
(``engine.stages.penalties.CountRows.counter``)."""


def unpack_row(
    packed: np.ndarray,
    layout: PackLayout,
    row_top_n: int,
    chain: Sequence[str],
    text_of: Callable[[int], str],
    count_of: CountOf,
) -> RowInspection:
    """Host side: one row of :func:`pack_outputs`, for a row whose stages were ``chain``
    (without ``raw``; a subset of the group's); candidates deduplicated and sorted by their
    last-stage logprob. :func:`unpack_rows` of one row."""
    return unpack_rows(packed[None, :], layout, [row_top_n], [tuple(chain)], text_of, [count_of])[0]


def unpack_rows(
    block: np.ndarray,
    layout: PackLayout,
    row_top_ns: Sequence[int],
    chains: Sequence[tuple[str, ...]],
    text_of: Callable[[int], str],
    counts: Sequence[CountOf],
) -> list[RowInspection]:
    """Host side: the rows ``block`` [R, layout.width] of one group, row ``r`` with its own
    ``row_top_ns[r]``, ``chains[r]`` and ``counts[r]`` (see :func:`unpack_row`). Logprobs,
    log Z and the entropies in float32, as the device would compute them."""
    n_rows = block.shape[0]
    d, n_slots, top_n = len(layout.order), layout.slots, layout.top_n
    stats = block[:, : len(STATS) * d].reshape(n_rows, len(STATS), d)
    at = len(STATS) * d
    logits = block[:, at + n_slots : at + n_slots + d * n_slots].reshape(n_rows, d, n_slots)
    log_z = np.log(stats[:, 1])  # [R, D]
    lps = (logits - stats[:, 0, :, None]) - log_z[:, :, None]  # [R, D, S]
    entropy = np.maximum(log_z - stats[:, 2] / stats[:, 1], np.float32(0.0)).tolist()
    survivors = stats[:, 3].tolist()
    ids = np.ascontiguousarray(block[:, at : at + n_slots]).view(np.int32).tolist()
    raw = logits[:, 0].tolist()
    raw_order = np.argsort(-logits[:, 0, :top_n], axis=-1, kind="stable").tolist()
    effects: list[list[list[float]] | None] = [None, None, None]
    for k, pair in enumerate(_effect_pairs(layout)):
        if pair is not None:
            with np.errstate(invalid="ignore"):  # a token removed before the stage: -inf - -inf is NaN, as on a device
                effects[k] = (logits[:, pair[1]] - logits[:, pair[0]]).tolist()
    # Each row's own chain, as distributions of the stack: padded with its last to the
    # longest, so that one gather serves rows of any chains (a pad repeats the last
    # distribution, so the first stage that removed a token is the same).
    plans = [_row_plan(layout, tuple(chain)) for chain in chains]
    widest = max(len(plan.rows) for plan in plans)
    index = [plan.rows + (plan.rows[-1],) * (widest - len(plan.rows)) for plan in plans]
    rows = np.arange(n_rows)
    values = lps[rows[:, None], np.array(index)]  # [R, C, S]
    removed = np.isneginf(values)
    first_removed = np.where(removed.any(axis=1), removed.argmax(axis=1), -1).tolist()  # [R, S]
    last = values[rows, [len(plan.rows) - 1 for plan in plans], top_n : 2 * top_n]
    last_order = np.argsort(-last, axis=-1, kind="stable").tolist()
    last_finite = np.isfinite(last).tolist()
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
    """A row's top ``row_top_n`` of raw and of the last stage (``finite``: of each last-stage
    slot, in slot order; finite ones only), then the chosen slot."""
    if top_n == 0 or row_top_n == 0:
        return [n_slots - 1]
    last = [top_n + s for s in last_order[:row_top_n] if finite[s]]
    return raw_order[:row_top_n] + last + [n_slots - 1]


def _candidates(
    plan: _RowPlan,
    wanted: list[int],
    ids: list[int],
    by_slot: list[list[float]],
    first_removed: list[int],
    raw: list[float],
    count_of: CountOf,
    effects: list[list[list[float]] | None],
    r: int,
    text_of: Callable[[int], str],
) -> tuple[Candidate, ...]:
    by_id: dict[int, int] = {}
    for slot in wanted:
        by_id.setdefault(ids[slot], slot)
    bias, penalty, dry = (e[r] if e is not None else None for e in effects)
    chain = plan.chain
    no_dry = 0.0 if "dry" in chain else None  # DRY in the row's chain, as the identity
    if no_dry is None:
        dry = None
    top = []
    for token, s in by_id.items():  # positional: ~20 a row, every step
        first = first_removed[s]
        top.append(
            Candidate(
                token,
                text_of(token),
                raw[s],
                tuple(by_slot[s]),
                chain[first] if first >= 0 else None,
                bias[s] if bias is not None else 0.0,
                penalty[s] if penalty is not None else 0.0,
                count_of(token),
                dry[s] if dry is not None else no_dry,
            )
        )
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
