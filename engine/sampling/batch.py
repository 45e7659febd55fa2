"""The sampling side of the running batch: each row's parameters and stage state.

Like mlx-lm's ``GenerationBatch``, everything that is per row lives in one object and
is filtered and extended in one place: the parameters and one
:class:`engine.stages.base.RowsState` per stage that has state (penalty counts on the
device, DRY on the host, the dense logit-bias rows, ...), made by the stage's own
factory. ``sample`` runs the chain for every group of rows that share a stage order,
and packs the inspection data of all of them into one array for the step's one host
transfer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import mlx.core as mx
import numpy as np

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.sampling.inspection import PackLayout, chain_layout, derived_lane
from engine.sampling.sampled import Sampled
from engine.sampling.sampler import columns, group_aliases, group_chain, group_forms, gumbel_noise, step_keys
from engine.sampling.step import compiled_step
from engine.sampling.unpack import CountOf, RowInspection
from engine.specs import row_chain
from engine.stages import STAGES
from engine.stages.base import Accepted, Rows, RowsState, StateContext, device_constant
from engine.stages.grammar import GrammarFacts, GrammarRows
from engine.stages.vocabulary import Vocabulary

_Recorded = TypeVar("_Recorded", RowInspection, TokenStep)

Carry = Mapping[str, Any]
"""What each stage with carried state (mirostat's μ) holds before a token, by stage name."""


@dataclass
class _Group:
    rows: Rows
    chain: tuple[str, ...]
    aliases: frozenset[str]
    columns: dict[str, mx.array]
    forms: tuple[str | None, ...]
    greedy: bool
    """Every row draws greedily (no noise to draw)."""
    any_greedy: bool
    """Some row draws greedily (else the step makes no greedy draw)."""
    layout: PackLayout
    updates: tuple[str, ...]
    """The stages whose state the step updates itself (``Stage.update``): the group is the
    whole batch."""


_zero = device_constant(lambda: mx.array(0))
"""The compiled step's placeholder for an input a chain does not take."""


def new_states(
    ctx: StateContext,
    params: Sequence[SamplingParams],
    histories: Sequence[Sequence[int]],
    carries: Sequence[Carry | None],
) -> dict[str, RowsState]:
    """Every stateful stage's state for these rows (``carries``: restored carried state)."""
    out = {}
    for name, stage in STAGES.items():
        if stage.state is not None:
            carried = [(c or {}).get(name) for c in carries]
            out[name] = stage.state(ctx, params, histories, carried)
    return out


def grammar_facts(states: Mapping[str, RowsState], row: int) -> GrammarFacts | None:
    """:meth:`engine.stages.grammar.GrammarRows.facts` of row ``row`` (None: no grammar)."""
    grammar = states.get("grammar")
    return grammar.facts(row) if isinstance(grammar, GrammarRows) else None


def with_facts(inspection: _Recorded, facts: GrammarFacts | None) -> _Recorded:
    """``inspection`` (a row's, or a scored token's step) with its grammar record completed
    by :func:`grammar_facts`."""
    if inspection.grammar is None or facts is None:
        return inspection
    return replace(inspection, grammar=replace(inspection.grammar, accepting=facts.accepting, left=facts.left))


def state_inputs(
    states: Mapping[str, RowsState],
    chain: Sequence[str],
    params: Sequence[SamplingParams],
    rows: Rows,
    indices: Sequence[int],
) -> dict[str, mx.array]:
    """The state inputs of the stages in ``chain``."""
    out: dict[str, mx.array] = {}
    for name, state in states.items():
        if name in chain:
            out.update(state.inputs(params, rows, indices))
    return out


SHARED_TOP_N = 20
"""Rows asking at most this many candidates (OpenAI's most) share their chain's group, packed
as wide as its widest; a row asking more (llama.cpp's ``n_probs`` takes 100) is packed in a
group of its own width, so that it widens no other row's pack (each step packs and unpacks
``2·top_n + 1`` candidates per stage) at the cost of a step for its group."""


def _width_class(top_n: int) -> int:
    return 0 if top_n <= SHARED_TOP_N else top_n


class SamplingBatch:
    """Rows in batch order, over one model's ``vocabulary`` (what the stages' state resolves
    against it: DRY's breakers, the grammars' matchers)."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocab = vocabulary.size
        self.ctx = StateContext(vocabulary)
        self.params: list[SamplingParams] = []
        self.states = new_states(self.ctx, [], [], [])
        self._groups: list[_Group] | None = None
        self._places: list[tuple[int, PackLayout]] = []  # each row's in the pack, per plan
        self.version = 0
        """Bumped by every change of a row's parameters or of the rows but a ``filter``, and when
        ``accept`` finds a state other than the one a step sampled ahead read: that step
        (``sample_ahead``) holds only while it is the same."""

    def __len__(self) -> int:
        return len(self.params)

    # Rows -------------------------------------------------------------------------

    @classmethod
    def of(
        cls, vocabulary: Vocabulary, params: SamplingParams, history: Sequence[int], carry: Carry | None = None
    ) -> SamplingBatch:
        """A batch of one row; ``carry`` restores carried state (a branch)."""
        batch = cls(vocabulary)
        batch.params = [params]
        batch.states = new_states(batch.ctx, [params], [history], [carry])
        return batch

    def extend(self, other: SamplingBatch) -> None:
        self.version += 1
        self.params += other.params
        for name, state in self.states.items():
            state.extend(other.states[name])
        self._groups = None

    def filter(self, keep: Sequence[int]) -> None:
        self.params = [self.params[i] for i in keep]
        for state in self.states.values():
            state.filter(keep)
        self._groups = None

    def prepare(self, params: SamplingParams) -> None:
        """Raise now what a live change to ``params`` would raise inside a stage's state
        (DRY resolves its breakers), so that a refused change changes nothing."""
        for stage in STAGES.values():
            if stage.prepare is not None:
                stage.prepare(self.ctx, params)

    def set_params(self, row: int, params: SamplingParams, history: Sequence[int]) -> None:
        """A live change from the next token: each stage's state decides what to rebuild."""
        self.version += 1
        old = self.params[row]
        self.params[row] = params
        for state in self.states.values():
            state.set_params(row, old, params, history)
        self._groups = None

    def with_state(self, row: int, inspection: RowInspection) -> RowInspection:
        """``inspection`` of row ``row``'s token, after :meth:`accept` took it, with what the
        stages' state knows of it (:func:`grammar_facts`)."""
        return with_facts(inspection, grammar_facts(self.states, row))

    def counter(self, row: int) -> CountOf:
        """Row ``row``'s token counts over its penalty window, as they stand (every
        candidate's ``count`` in the inspection: read before :meth:`accept` takes the step)."""
        return self.states["penalties"].counter(row)

    def counters(self) -> list[CountOf]:
        return [self.counter(row) for row in range(len(self.params))]

    def carry(self, row: int) -> dict[str, Any]:
        """The carried state of a row before its next token (for a later branch)."""
        out = {}
        for name, state in self.states.items():
            value = state.carry(row)
            if value is not None:
                out[name] = value
        return out

    def accept(
        self, tokens: Sequence[int], leaving: Sequence[int | None], steps: Sequence[RowInspection] | None = None
    ) -> None:
        """Every row's new token (llama.cpp's ``accept``), with the step that chose it."""
        if steps is None:
            accepted = [Accepted(t, leave) for t, leave in zip(tokens, leaving, strict=True)]
        else:
            accepted = [
                Accepted(t, leave, s.chain, s.logprobs) for t, leave, s in zip(tokens, leaving, steps, strict=True)
            ]
        for name, state in self.states.items():
            state.accept(self.params, accepted)
            if STAGES[name].update is not None and not state.ahead_held():  # type: ignore[attr-defined]
                self.version += 1  # the step sampled ahead read a state the host does not hold

    def mark(self) -> dict[str, Any]:
        """Where every row's state stands now (``RowsState.mark``: not a copy of the
        histories), for :meth:`rewind`."""
        return {name: state.mark() for name, state in self.states.items()}

    def rewind(self, mark: Mapping[str, Any]) -> None:
        """Every row's state back to ``mark``, taken on these same rows with these same
        parameters: the tokens accepted since are forgotten (a draft's proposals)."""
        self.version += 1
        for name, state in self.states.items():
            state.rewind(mark[name])

    # Sampling ---------------------------------------------------------------------

    def sample(self, logits: mx.array, indices: Sequence[int], forced: Sequence[int | None] | None = None) -> Sampled:
        """Run each row's chain on ``logits`` [B, V]; ``indices`` are the rows' output
        token indices (for the seeded draw and XTC coin); ``forced`` overrides the draw."""
        groups = self._plan()
        top_n, chains = self._top_n, self._chains
        tokens_parts, packed_parts, final_parts = [], [], []
        wholes: list[Callable[[], mx.array]] = []  # each group's pack with nothing derived
        derived = False
        zero = _zero()
        joined: dict[str, dict[int, Mapping[str, mx.array]]] = {}  # row-wise updates of a step of groups
        for group in groups:
            rows = group.rows.rows
            inputs = dict(group.columns)
            inputs.update(state_inputs(self.states, group.chain, self.params, group.rows, indices))
            noise = None
            if not group.greedy:
                keys = step_keys([self.params[r].seed for r in rows], [indices[r] for r in rows])
                noise = gumbel_noise(keys, self.vocab)
            override = None
            if forced is not None and any(forced[r] is not None for r in rows):
                override = mx.array([forced[r] if forced[r] is not None else -1 for r in rows], dtype=mx.int32)
            for name in group.updates:
                inputs.update(self.states[name].update_inputs())
            step = partial(
                compiled_step,
                group.chain,
                group.aliases,
                noise is not None,
                group.forms,
                group.layout,
                override is not None,
                group.updates,
                group.any_greedy,
            )
            noise_in, override_in = (zero if a is None else a for a in (noise, override))
            args = (group.rows.take(logits), inputs, noise_in, override_in)
            tokens, packed, final, updated = step()(*args)
            if derived_lane(group.layout, inputs) is not None:
                derived = True
            wholes.append(lambda step=step, args=args: step(derive=False)(*args)[1].reshape(-1))
            for name in group.updates:
                if group.rows.index is None:
                    self.states[name].updated(updated[name])
                else:
                    joined.setdefault(name, {})[id(group)] = updated[name]
            tokens_parts.append(tokens)
            packed_parts.append(packed.reshape(-1))
            final_parts.append(final)
        tokens, final = tokens_parts[0], final_parts[0]
        packed = packed_parts[0] if len(groups) == 1 else mx.concatenate(packed_parts)
        if len(groups) > 1:
            order = [r for g in groups for r in g.rows.rows]
            back = mx.array(np.argsort(order).astype(np.int32))
            tokens, final = (mx.concatenate(p)[back] for p in (tokens_parts, final_parts))
            for name, parts in joined.items():
                self._join_updated(name, groups, parts, indices, back)
        whole = None
        if derived:
            whole = wholes[0] if len(wholes) == 1 else lambda: mx.concatenate([w() for w in wholes])
        return Sampled(tokens, packed, top_n, list(chains), final, self._places, whole)

    def _join_updated(
        self,
        name: str,
        groups: list[_Group],
        parts: dict[int, Mapping[str, mx.array]],
        indices: Sequence[int],
        back: mx.array,
    ) -> None:
        """A row-wise state's update (``Stage.update_rows``) from each group of a step, in
        batch order: a group without the stage gives its rows' state as it stands."""
        state = self.states[name]
        pieces = [parts[id(g)] if id(g) in parts else state.inputs(self.params, g.rows, indices) for g in groups]
        state.updated({key: mx.concatenate([p[key] for p in pieces])[back] for key in pieces[0]})

    def sample_ahead(
        self, logits: mx.array, tokens: mx.array, leaving: Sequence[int | None], indices: Sequence[int]
    ) -> Sampled | None:
        """The next step sampled before this one is read back (mlx-lm's ``generate_step``
        queues step n+1 whole before it reads step n): every state the chains read takes
        ``tokens`` (this step's, still on the device) with ``advance``, then ``logits`` (the
        next step's) are sampled at ``indices``. None when a state the chains read needs the
        token on the host (the grammar; mirostat's μ but where the step computed it): nothing is
        changed then. A state that ``accept`` finds other than what was read here bumps
        ``version``, and the step is sampled again."""
        used = {name for group in self._plan() for name in group.chain}
        states = [s for name, s in self.states.items() if name in used]
        if not all(s.advances for s in states):
            return None
        for state in states:
            state.advance(tokens, leaving)
        return self.sample(logits, indices)

    def _plan(self) -> list[_Group]:
        if self._groups is None:
            by_order: dict[tuple[tuple[str, ...], int], list[int]] = {}
            for row, p in enumerate(self.params):
                by_order.setdefault((p.samplers, _width_class(p.top_logprobs)), []).append(row)
            whole = len(by_order) == 1
            # What every step reads of the rows' parameters, until they change.
            self._top_n = min(max(p.top_logprobs for p in self.params), self.vocab)
            self._chains = [row_chain(p) for p in self.params]
            self._groups = []
            for rows in by_order.values():
                params = [self.params[r] for r in rows]
                chain = group_chain(params)
                index = None if whole else mx.array(rows, dtype=mx.int32)
                aliases = group_aliases(params, chain)
                forms = group_forms(params, chain)
                greedy, any_greedy = all(p.greedy for p in params), any(p.greedy for p in params)
                top_n = min(max(p.top_logprobs for p in params), self.vocab)  # the group's own
                layout = chain_layout(chain, aliases, top_n)
                updates = tuple(n for n in chain if STAGES[n].update is not None and (whole or STAGES[n].update_rows))
                group = _Group(
                    Rows(rows, index),
                    chain,
                    aliases,
                    columns(params, chain),
                    forms,
                    greedy,
                    any_greedy,
                    layout,
                    updates,
                )
                self._groups.append(group)
            # Where each row sits in the step's pack: its group's rows one after another.
            places: dict[int, tuple[int, PackLayout]] = {}
            offset = 0
            for group in self._groups:
                for row in group.rows.rows:
                    places[row] = (offset, group.layout)
                    offset += group.layout.width
            self._places = [places[row] for row in range(len(self.params))]
        return self._groups
