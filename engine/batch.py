"""The sampling side of the running batch: each row's parameters and stage state.

Like mlx-lm's ``GenerationBatch``, everything that is per row lives in one object and
is filtered and extended in one place: the parameters, the penalty counts ([B, V] on
the device), the DRY state (on the host), and the dense logit-bias rows. ``sample``
runs the chain for every group of rows that share a stage order, and packs the
inspection data of all of them into one array for the step's one host transfer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from engine.dry import Breakers, DryRow
from engine.inspection import pack_step
from engine.params import SamplingParams
from engine.penalties import PenaltyCounts, count_tokens
from engine.sampler import columns, group_aliases, group_chain, gumbel_noise, run_chain, step_key, xtc_coin
from engine.stages import row_chain


@dataclass
class _Group:
    rows: list[int]
    chain: tuple[str, ...]
    aliases: frozenset[str]
    columns: dict[str, mx.array]
    index: mx.array | None  # None: the group is the whole batch, in order


@dataclass
class Sampled:
    tokens: mx.array
    """[B] int32, on the device (speculative decode feeds them to the next forward pass)."""
    packed: mx.array
    """[B, W] float32 inspection data (see engine.inspection.pack_step), batch order."""
    top_n: int
    chains: list[tuple[str, ...]]
    """Each row's own chain (without ``raw``)."""
    final: mx.array
    """[B, V] logits after each row's last stage, batch order (for fork divergences)."""


class SamplingBatch:
    """Rows in batch order. ``breakers`` resolves DRY sequence breakers for the vocabulary."""

    def __init__(self, vocab: int, breakers: Callable[[tuple[str, ...]], Breakers]) -> None:
        self.vocab = vocab
        self._breakers = breakers
        self.params: list[SamplingParams] = []
        self.counts = PenaltyCounts.from_histories([], [], vocab)
        self.dry: list[DryRow | None] = []
        self._groups: list[_Group] | None = None
        self._bias: mx.array | None = None

    def __len__(self) -> int:
        return len(self.params)

    # Rows -------------------------------------------------------------------------

    @classmethod
    def of(
        cls, vocab: int, breakers: Callable[[tuple[str, ...]], Breakers], params: SamplingParams, history: Sequence[int]
    ) -> SamplingBatch:
        """A batch of one row."""
        batch = cls(vocab, breakers)
        batch.params = [params]
        batch.counts = PenaltyCounts.from_histories([history], [params.penalty_window], vocab)
        batch.dry = [batch._dry_row(params, history)]
        return batch

    def extend(self, other: SamplingBatch) -> None:
        self.params += other.params
        self.counts.extend(other.counts)
        self.dry += other.dry
        self._dirty()

    def filter(self, keep: Sequence[int]) -> None:
        self.params = [self.params[i] for i in keep]
        self.dry = [self.dry[i] for i in keep]
        self.counts.filter(keep)
        self._dirty()

    def set_params(self, row: int, params: SamplingParams, history: Sequence[int]) -> None:
        """A live change from the next token: recount a new window, rebuild DRY state
        when DRY is switched on or its breakers change."""
        old = self.params[row]
        self.params[row] = params
        if params.penalty_window != old.penalty_window:
            self.counts.counts[row] = mx.array(count_tokens(history, params.penalty_window, self.vocab))
        if not params.has_dry:
            self.dry[row] = None
        elif self.dry[row] is None or params.dry_sequence_breakers != old.dry_sequence_breakers:
            self.dry[row] = self._dry_row(params, history)
        self._dirty()

    def accept(self, tokens: Sequence[int], leaving: Sequence[int | None]) -> None:
        """Every row's new token (llama.cpp's ``accept``): O(1) counts, O(window) DRY."""
        self.counts.accept(tokens, leaving)
        for dry, token in zip(self.dry, tokens, strict=True):
            if dry is not None:
                dry.accept(token)

    def _dry_row(self, params: SamplingParams, history: Sequence[int]) -> DryRow | None:
        if not params.has_dry:
            return None
        return DryRow(history, self._breakers(params.dry_sequence_breakers))

    def _dirty(self) -> None:
        self._groups = None
        self._bias = None

    # Sampling ---------------------------------------------------------------------

    def sample(self, logits: mx.array, indices: Sequence[int], forced: Sequence[int | None] | None = None) -> Sampled:
        """Run each row's chain on ``logits`` [B, V]; ``indices`` are the rows' output
        token indices (for the seeded draw and XTC coin); ``forced`` overrides the draw."""
        groups = self._plan()
        top_n = min(max(p.top_logprobs for p in self.params), self.vocab)
        counts = self.counts.counts
        dry = self._dry_dense() if any(d is not None for d in self.dry) else None
        tokens_parts, packed_parts, final_parts = [], [], []
        for group in groups:
            rows = group.rows
            take = (lambda a: a) if group.index is None else (lambda a, i=group.index: a[i])
            inputs = dict(group.columns)
            if "bias" in group.chain:
                inputs["bias"] = take(self._bias_dense())
            if "penalties" in group.chain:
                inputs["counts"] = take(counts)
            if "dry" in group.chain:
                inputs["dry"] = take(dry)
            if "xtc" in group.chain:
                coins = [xtc_coin(self.params[r].seed, indices[r]) for r in rows]
                inputs["xtc_coin"] = mx.array(np.asarray(coins, np.float32).reshape(-1, 1))
            noise = None
            if not all(self.params[r].greedy for r in rows):
                noise = gumbel_noise([step_key(self.params[r].seed, indices[r]) for r in rows], self.vocab)
            result = run_chain(take(logits), group.chain, inputs, noise, group.aliases)
            if forced is not None and any(forced[r] is not None for r in rows):
                override = mx.array([forced[r] if forced[r] is not None else -1 for r in rows], dtype=mx.int32)
                result.tokens = mx.where(override >= 0, override, result.tokens)
            tokens_parts.append(result.tokens)
            packed_parts.append(pack_step(result, take(counts), top_n))
            final_parts.append(result.outputs[-1])
        tokens, packed, final = tokens_parts[0], packed_parts[0], final_parts[0]
        if len(groups) > 1:
            order = [r for g in groups for r in g.rows]
            back = mx.array(np.argsort(order).astype(np.int32))
            tokens, packed, final = (mx.concatenate(p)[back] for p in (tokens_parts, packed_parts, final_parts))
        return Sampled(tokens, packed, top_n, [row_chain(p) for p in self.params], final)

    def _plan(self) -> list[_Group]:
        if self._groups is None:
            by_order: dict[tuple[str, ...], list[int]] = {}
            for row, p in enumerate(self.params):
                by_order.setdefault(p.samplers, []).append(row)
            whole = len(by_order) == 1
            self._groups = []
            for rows in by_order.values():
                params = [self.params[r] for r in rows]
                chain = group_chain(params)
                index = None if whole else mx.array(rows, dtype=mx.int32)
                aliases = group_aliases(params, chain)
                self._groups.append(_Group(rows, chain, aliases, columns(params, chain), index))
        return self._groups

    def _bias_dense(self) -> mx.array:
        if self._bias is None:
            dense = np.zeros((len(self.params), self.vocab), dtype=np.float32)
            for row, p in enumerate(self.params):
                for token, value in p.logit_bias.items():
                    dense[row, token] = value
            self._bias = mx.array(dense)
        return self._bias

    def _dry_dense(self) -> mx.array:
        dense = np.zeros((len(self.params), self.vocab), dtype=np.float32)
        for row, (dry, p) in enumerate(zip(self.dry, self.params, strict=True)):
            if dry is not None:
                tokens, values = dry.penalties(p)
                dense[row, tokens] = values
        return mx.array(dense)
