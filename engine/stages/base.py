"""What a stage is on the device: its spec, a pure ``apply`` over the batch, its inputs and state.

Like llama.cpp's ``llama_sampler_i``: ``apply(logits, inputs)`` maps ``[B, V] float32``
logits to logits, reading per-row parameters as ``[B, 1]`` arrays from ``inputs``. A
neutral value makes a stage the exact identity for its row, so rows with different
settings share one graph. A stage with state (penalty counts, DRY, mirostat's μ)
declares a factory of :class:`RowsState`; the scheduler's batch and scoring keep one
per stage in step with the rows, and ``accept`` it each token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple, Protocol

import mlx.core as mx

from engine.api.params import SamplingParams
from engine.specs.spec import StageSpec
from engine.stages.vocabulary import Vocabulary

NEG_INF = float("-inf")

Inputs = Mapping[str, mx.array]


@dataclass(frozen=True)
class StateContext:
    """What state factories may need besides the rows: the model's vocabulary, its size,
    DRY's breakers and the grammars' matchers resolved against it."""

    vocabulary: Vocabulary

    @property
    def vocab(self) -> int:
        return self.vocabulary.size

    def breakers(self, texts: tuple[str, ...]) -> Any:
        return self.vocabulary.breakers(texts)


@dataclass(frozen=True)
class Accepted:
    """One row's new token, and (when known) the step that chose it."""

    token: int
    leaving: int | None
    """The token that left the penalty window as this one arrived."""
    chain: tuple[str, ...] = ()
    """The row's chain from ``raw``; empty when the step's result is not known here."""
    logprobs: tuple[float, ...] = ()
    """The token's logprob after each stage of ``chain``."""

    def logprob_at(self, stage: str) -> float | None:
        return self.logprobs[self.chain.index(stage)] if stage in self.chain else None


@dataclass(frozen=True)
class Rows:
    """The rows of a batch one group of the step covers."""

    rows: list[int]
    index: mx.array | None
    """None: the whole batch, in order."""

    def take(self, values: mx.array) -> mx.array:
        return values if self.index is None else values[self.index]


class RowsState(Protocol):
    """One stage's state for the rows of a batch, in batch order (llama.cpp's sampler
    context, for many rows at once)."""

    def extend(self, other: Any) -> None: ...
    def filter(self, keep: Sequence[int]) -> None: ...
    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        """A live change of one row's parameters from its next token."""
        ...

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None: ...
    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        """This step's inputs for ``rows`` (``indices``: every row's output token index)."""
        ...

    def carry(self, row: int) -> Any:
        """What a branch from this row's next token must restore (None: rebuilt from the history)."""
        ...

    advances: bool
    """Whether ``advance`` can take a token still on the device (False: the state needs
    it on the host, and the next step is not sampled ahead while the state is read)."""

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        """Take each row's new token while it is still on the device ([B] int32), so the next
        step's sampling can be queued before this one is read back; the ``accept`` that
        follows then leaves what was done here. Called only when ``advances``."""
        ...

    def mark(self) -> Any:
        """Where every row stands now, for :meth:`rewind` (a draft's block proposes tokens
        and goes back to here): its cost must not grow with the history."""
        ...

    def rewind(self, mark: Any) -> None:
        """Every row back to ``mark`` (taken on these same rows): the tokens accepted since
        are forgotten."""
        ...


class UpdatedOnDevice(Protocol):
    """What a :class:`RowsState` whose next value the compiled step computes from its token
    (state in, new state out: ``Stage.update``, where the step covers the whole batch, or
    in each group with ``Stage.update_rows``) has besides."""

    def update_inputs(self) -> dict[str, mx.array]:
        """What ``Stage.update`` reads besides the stage's ``inputs``, for every row."""
        ...

    def updated(self, new: Mapping[str, mx.array]) -> None:
        """The state after the step's tokens (``Stage.update``'s result, still on the device):
        the ``advance`` or ``accept`` of those tokens takes it instead of computing it."""
        ...

    def ahead_held(self) -> bool:
        """After ``accept``: whether the state a step sampled ahead read (the last
        ``updated``, taken by ``advance``) is the one ``accept`` computed on the host. A
        state updated in floats may differ by a rounding (False: that step is sampled again)."""
        ...


StateFactory = Callable[[StateContext, Sequence[SamplingParams], Sequence[Sequence[int]], Sequence[Any]], RowsState]
"""(context, each row's params, history and carried value) -> the rows' state."""


def _no_columns(p: SamplingParams) -> dict[str, float]:
    return {}


class BoundedView(NamedTuple):
    """What a sort of *bounded* logits would give (``engine.stages.top_k.after_bounded_top_k``:
    their finite values outside the ``BOUND`` largest all equal the ``BOUND``-th), kept
    along a chain so that the stages after a bounded top_k read it instead of each
    partitioning the vocabulary and sorting again (``Stage.viewed``)."""

    ordered: mx.array
    """[B, M]: the M largest values, descending."""
    tail: mx.array
    """[B, 1] float32: how many finite values lie outside them (each equal to the last)."""
    top: mx.array
    """[B, 1]: the largest value, which every stage that keeps a view keeps (read from here,
    not from a cut ``ordered``: a kernel fewer where only it is read)."""

    def cut(self, threshold: mx.array) -> BoundedView:
        """The view of the logits once those below ``threshold`` [B, 1] (at most ``top``) are
        -inf: the kept values are a prefix of ``ordered``, and the tail goes with the last.
        The caller writes ``threshold`` apart from the one its logits are cut by (the same
        values): MLX's compile keeps a value two element-wise readers share as a kernel of
        its own, and fuses one read by one."""
        ordered = mx.where(self.ordered < threshold, NEG_INF, self.ordered)
        # The tail stays while the last value does (read from the cut, the threshold has one
        # reader; a last value already -inf had no tail).
        return BoundedView(ordered, mx.where(ordered[:, -1:] > NEG_INF, self.tail, 0.0), self.top)


Viewed = Callable[[mx.array, "Inputs", BoundedView | None], tuple[mx.array, BoundedView | None]]


@dataclass(frozen=True)
class Stage:
    spec: StageSpec
    apply: Callable[[mx.array, Inputs], mx.array]
    """logits [B, V] float32, inputs -> logits [B, V] float32; pure."""
    columns: Callable[[SamplingParams], Mapping[str, float]] = _no_columns
    """This row's scalar inputs, by input name (become [B, 1] float32 arrays)."""
    int_columns: tuple[str, ...] = ()
    """Inputs among ``columns`` that are int32, not float32."""
    state: StateFactory | None = None
    """The per-row state this stage reads (its inputs come from ``RowsState.inputs``)."""
    needs_result: bool = False
    """Its state's ``accept`` reads the step's result (the chosen token's logprobs), so
    scoring runs one position at a time through a chain holding it."""
    prepare: Callable[[StateContext, SamplingParams], None] | None = None
    """Work a live change needs that may fail, done before any row's state changes."""
    identity: Callable[[SamplingParams], bool] | None = None
    """Whether the stage leaves a row's logits exactly as they are (default: its values are
    neutral). A stage that is the identity for every row of a group is not computed at all."""
    forms: tuple[tuple[str, Callable[[SamplingParams], bool], Callable[[mx.array, Inputs], mx.array]], ...] = ()
    """Cheaper forms of ``apply`` that give the same values for the rows that allow them:
    ``(name, whether a row allows it, the function)``. A group whose every row allows a form
    runs the first such (the chain is compiled once per form), else ``apply``."""
    chain_forms: tuple[
        tuple[
            str,
            Callable[[Sequence[SamplingParams], Sequence[str], Sequence[str | None]], bool],
            Callable[[mx.array, Inputs], mx.array],
        ],
        ...,
    ] = ()
    """Forms that depend on the stages before this one: ``(name, whether the group's rows,
    the stages before it and their forms allow it, the function)``; tried after ``forms``."""

    viewed: Viewed | None = None
    """Its ``bounded`` form given the view of its input (``(logits, inputs, view or None:
    make it) -> (output, the output's view or None)``): the chain carries the view from a
    bounded top_k through the bounded stages after it (``engine.sampling.sampler.apply_chain``),
    a partition of the vocabulary and a sort fewer for each that reads it."""
    statistics: Callable[[mx.array, mx.array, Inputs], mx.array] | None = None
    """``(entering, raw, inputs) -> [B, statistics_width]`` float32: figures of what the stage
    did that the inspection pack carries for every row of a group it ran in (``grammar``:
    the mass it kept, its allowed tokens, the model's choice it overrode)."""
    statistics_width: int = 0
    update: Callable[[Inputs, mx.array, Callable[[str], mx.array]], dict[str, mx.array]] | None = None
    """``(inputs, tokens [B] int32, logprob_at) -> the state's next arrays``: traced into the
    compiled step when its group is the whole batch (or is any group, with ``update_rows``),
    so the state's update costs no kernels
    of its own (the state is an :class:`UpdatedOnDevice`; its ``update_inputs`` are in
    ``inputs``). ``logprob_at(stage)``: the drawn token's logprob after ``stage`` [B, 1],
    as the host reads it from the pack (``Accepted.logprob_at`` on the device)."""

    update_rows: bool = False
    """Its ``update`` reads and writes only the group's rows (a [B, ...] state of one value
    a row, mirostat's μ): a step of several groups computes it in each, and the batch joins
    the groups' results in batch order (the rows of a group without the stage keep theirs:
    ``RowsState.inputs`` of every row). Otherwise only a step over the whole batch does."""
    join: Callable[[Sequence[Inputs]], dict[str, mx.array]] | None = None
    """How the state inputs of several one-row steps (scoring's positions, each ``Rows``
    of one) join into one step's, for inputs whose rows are not all alike in shape
    (None: each input's rows concatenated)."""

    @property
    def name(self) -> str:
        return self.spec.name

    def form_for(
        self, params: Sequence[SamplingParams], before: Sequence[str] = (), forms: Sequence[str | None] = ()
    ) -> str | None:
        """The first form the rows of ``params`` allow after the stages ``before`` (in their
        ``forms``), or None (the general ``apply``)."""
        own = next((name for name, allows, _ in self.forms if all(allows(p) for p in params)), None)
        if own is not None:
            return own
        return next((name for name, allows, _ in self.chain_forms if allows(params, before, forms)), None)

    def apply_form(self, form: str | None) -> Callable[[mx.array, Inputs], mx.array]:
        every = (*self.forms, *self.chain_forms)
        return next((fn for name, _, fn in every if name == form), self.apply)

    def active(self, params: SamplingParams) -> bool:
        """Whether this stage runs for a row with these parameters."""
        return self.spec.active(params)

    def is_identity(self, params: SamplingParams) -> bool:
        return self.identity(params) if self.identity is not None else self.spec.neutral(params)


def device_constant(make: Callable[..., Any]) -> Callable[..., Any]:
    """``make(*args)``'s arrays made and evaluated once per ``args``, then kept: a step that
    takes them builds no host array each time, and a compiled step reads them as constants
    (an ``arange`` traced into it would be a kernel every step)."""

    @lru_cache(maxsize=64)
    def made(*args: Any) -> Any:
        arrays = make(*args)
        mx.eval(arrays)
        return arrays

    return made


vocabulary_ids = device_constant(lambda vocab: mx.arange(vocab, dtype=mx.int32))
"""[0 .. vocab - 1] int32, per vocabulary size (a constant of the compiled steps)."""

_GPU_FORMS: bool | None = None  # None: the default device's forms


def cpu_forms() -> bool:
    """Whether a step traced now takes the forms MLX's CPU backend runs fastest: ``exp`` as a
    power of two, sums by blocks, the Gumbel draw uncompiled, the pack's statistics summed
    apart (a GPU's forms fuse them as lanes: fewer launches, more arithmetic).
    Decided when a step is traced (the compiled steps are kept per answer); a GPU's forms
    are the plain ones."""
    return mx.default_device() == mx.cpu if _GPU_FORMS is None else not _GPU_FORMS


@contextmanager
def gpu_forms() -> Iterator[None]:
    """Trace steps in a GPU's forms whatever the device: to count a GPU step's kernels on a
    CPU (bench figure 21) and to check those forms' values where no GPU is."""
    global _GPU_FORMS
    saved, _GPU_FORMS = _GPU_FORMS, True
    try:
        yield
    finally:
        _GPU_FORMS = saved


LOG2_E = 1.4426950408889634


def exp(values: mx.array) -> mx.array:
    """e ** values, element-wise. On MLX's CPU backend as 2 ** (values * log2 e): its ``exp``
    costs 12 ns a value and a power of two 5 (measured over a 49,152-token vocabulary, where
    the inspection pack's exps were a third of a greedy step), with the same float32
    accuracy (relative error under 2e-6 against float64, checked by the tests). A GPU's
    ``exp`` is one instruction: it keeps it. Decided when a compiled step is traced."""
    if cpu_forms():
        return mx.power(2.0, values * LOG2_E)
    return mx.exp(values)


def log_softmax(logits: mx.array) -> mx.array:
    """[B, V] -> [B, V]; -inf stays -inf."""
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def sort_descending(logits: mx.array) -> mx.array:
    """The values of each row, largest first: the ascending sort read backwards (a view; a
    negation on each side of the sort would be a kernel of its own, the sort not fusing)."""
    return mx.sort(logits, axis=-1)[..., ::-1]


lane_index = device_constant(lambda n: mx.arange(n, dtype=mx.int32)[:, None])
"""[n, 1]: the lane index of sums taken as lanes of one reduction (a kernel and one sum
where a kernel and a sum each were: on a GPU a step costs its launches)."""


def count_and_total(logits: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
    """How many of each row's ``logits`` [B, V] are still in the distribution, and the total
    of ``values`` [B, 1, V] over them: [B, 1] each, two lanes of one reduction (a count of
    ones is exact in float32 up to 2**24 tokens). ``values`` is written on the lanes' shape
    (from ``logits[:, None]`` or the like), so that it is computed in the lanes' kernel."""
    x = logits[:, None]
    present = x > NEG_INF
    sums = mx.sum(mx.where(_counting_lane(), mx.where(present, 1.0, 0.0), mx.where(present, values, 0.0)), axis=-1)
    return sums[:, :1], sums[:, 1:]


# A constant mask, not ``lane_index(2) == 0``: two stages of one step comparing the same
# constant would share that comparison, and MLX's compile would keep it as a kernel.
_counting_lane = device_constant(lambda: lane_index(2) == 0)


def finite_mask(logits: mx.array) -> mx.array:
    """Tokens still in the distribution (removed ones are -inf)."""
    return logits > NEG_INF


class StepInputs:
    """A stateless ``RowsState``: inputs computed from each row's parameters and output
    index alone (XTC's coin). ``make(params, indices)`` covers the group's rows."""

    def __init__(self, make: Callable[[list[SamplingParams], list[int]], dict[str, mx.array]]) -> None:
        self._make = make

    def extend(self, other: Any) -> None:
        pass

    def filter(self, keep: Sequence[int]) -> None:
        pass

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        pass

    def mark(self) -> Any:
        return None

    def rewind(self, mark: Any) -> None:
        pass

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        pass

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        return self._make([params[r] for r in rows.rows], [indices[r] for r in rows.rows])

    def carry(self, row: int) -> Any:
        return None

    advances = True  # nothing is carried from token to token

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        pass


def step_inputs(make: Callable[[list[SamplingParams], list[int]], dict[str, mx.array]]) -> StateFactory:
    """The factory of a :class:`StepInputs` state."""
    return lambda ctx, params, histories, carries: StepInputs(make)
