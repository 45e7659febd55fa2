"""``grammar``: structured output, each row's llguidance matcher and its token mask.

Each row with a grammar keeps an ``llguidance.LLMatcher`` that has read the row's output
since the grammar was set. Before a step its next-token mask is written by llguidance into
an int32 bitmask (one bit per token, llguidance's own layout) on the host, while the
device runs the forward pass the scheduler queued before it read the last step back; the
kernel unpacks it with plain MLX ops (llguidance's MLX helper is a Metal kernel only) and
sets every token it forbids to ``-inf``. A row without a grammar sends all ones: the
exact identity.

What a branch restores (``carry``) is the grammar in force and how many tokens it has read:
the factory reads those last tokens of the history again when the row's grammar is that one. A forced token the
grammar forbids (a branch's, a scored text's) leaves the grammar: the row keeps every
token from then on, and its records say where it left.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import mlx.core as mx
import numpy as np

from engine.api.grammar import GrammarRecord
from engine.api.params import SamplingParams, SamplingParamsError
from engine.specs.grammar import SPEC
from engine.stages.base import NEG_INF, Accepted, Inputs, Rows, Stage, StateContext
from engine.stages.vocabulary import GrammarUnavailable

MASK = "grammar_mask"
"""The step's input: [rows, ceil(V / 32)] int32, bit ``t % 32`` of word ``t // 32`` set
where token ``t`` is allowed."""


def mask_words(vocab: int) -> int:
    return (vocab + 31) // 32


def unpack_mask(bits: mx.array, vocab: int) -> mx.array:
    """[B, W] int32 bitmask -> [B, V] bool (llguidance's layout: little-endian bits)."""
    shifts = mx.arange(32, dtype=mx.int32)
    words = mx.right_shift(bits[:, :, None], shifts) & 1
    return words.reshape(bits.shape[0], -1)[:, :vocab] > 0


def apply_grammar(logits: mx.array, allowed: mx.array, raw: mx.array) -> mx.array:
    """Keep the allowed tokens; a row where a stage before left none of them gets the
    allowed tokens with their ``raw`` logits (the draw never leaves the grammar)."""
    kept = mx.where(allowed, logits, NEG_INF)
    none_left = mx.logical_not(mx.any(kept > NEG_INF, axis=-1, keepdims=True))
    return mx.where(none_left, mx.where(allowed, raw, NEG_INF), kept)


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    # ``raw``: the chain's input (``engine.sampling.sampler.apply_chain`` adds it); a stage
    # applied alone is given the chain's input itself.
    return apply_grammar(logits, unpack_mask(inputs[MASK], logits.shape[-1]), inputs.get("raw", logits))


STATISTICS = ("kept", "kept_raw", "allowed", "wanted")
"""The pack's figures of the grammar, per row: log Σ exp of the allowed tokens' logits
entering the stage and in ``raw`` (against each distribution's own log Z on the host: the
mass kept), how many tokens were allowed, and ``raw``'s argmax where the grammar forbade it
(-1 where it allowed it)."""


def _statistics(entering: mx.array, raw: mx.array, inputs: Inputs) -> mx.array:
    allowed = unpack_mask(inputs[MASK], raw.shape[-1])
    kept = mx.logsumexp(mx.where(allowed, entering, NEG_INF), axis=-1)
    kept_raw = kept if entering is raw else mx.logsumexp(mx.where(allowed, raw, NEG_INF), axis=-1)
    best = mx.argmax(raw, axis=-1, keepdims=True).astype(mx.int32)
    overridden = mx.logical_not(mx.take_along_axis(allowed, best, axis=-1))[:, 0]
    wanted = mx.where(overridden, best[:, 0], -1)
    count = mx.sum(allowed, axis=-1)
    return mx.stack([kept, kept_raw, count.astype(mx.float32), wanted.astype(mx.float32)], axis=1)


def grammar_record(values: np.ndarray, log_z_entering: float, log_z_raw: float) -> GrammarRecord:
    """The device's part of a token's record, from its packed :data:`STATISTICS` and the log
    partitions of the distribution entering the stage and of ``raw``."""
    kept, kept_raw, allowed, wanted = (float(v) for v in values)
    return GrammarRecord(
        allowed=int(allowed),
        removed=_removed(kept, log_z_entering),
        removed_raw=_removed(kept_raw, log_z_raw),
        wanted=None if wanted < 0 else int(wanted),
    )


def _removed(kept: float, log_z: float) -> float:
    """1 − exp(kept − log Z) in [0, 1] (float32 inputs: a kept mass a rounding above the whole is none removed)."""
    if kept == -math.inf:
        return 1.0
    return min(1.0, max(0.0, -math.expm1(kept - log_z)))


class GrammarFacts(NamedTuple):
    """What a row's grammar says after its last token."""

    accepting: bool
    """The output so far is complete under the grammar."""
    left: bool
    """A forced token the grammar forbids came: it keeps every token from there on."""


@dataclass
class GrammarRow:
    """One row's matcher: the grammar, how many tokens it has read, whether a token it
    forbids was forced (it then keeps every token), and its mask for the next token."""

    grammar: tuple[str, ...]
    matcher: Any
    consumed: int = 0
    left: bool = False
    mask: np.ndarray | None = None

    def accept(self, token: int) -> None:
        self.consumed += 1
        self.mask = None
        if not self.left and not self.matcher.consume_token(token):
            self.left = True

    def accepting(self) -> bool:
        """Whether the output so far is complete under the grammar."""
        return not self.left and self.matcher.is_accepting()

    def next_mask(self, words: int) -> np.ndarray:
        if self.mask is None:
            from llguidance.numpy import fill_next_token_bitmask

            mask = np.full((1, words), -1, dtype=np.int32)
            if not self.left:
                fill_next_token_bitmask(self.matcher, mask, 0)
            self.mask = mask[0]
        return self.mask


class GrammarRows:
    """Every row's :class:`GrammarRow`, or None where the row has no grammar."""

    advances = False  # the matcher reads the token on the host

    def __init__(self, ctx: StateContext, rows: list[GrammarRow | None]) -> None:
        self.ctx, self.rows = ctx, rows

    def extend(self, other: GrammarRows) -> None:
        self.rows += other.rows

    def filter(self, keep: Sequence[int]) -> None:
        self.rows = [self.rows[i] for i in keep]

    def set_params(self, row: int, old: SamplingParams, new: SamplingParams, history: Sequence[int]) -> None:
        # A new grammar starts at the next token: it reads the output from there on (a
        # reasoning model's answer settings start theirs with the answer).
        if new.grammar != old.grammar:
            self.rows[row] = _row(self.ctx, new, history, None)

    def accept(self, params: Sequence[SamplingParams], accepted: Sequence[Accepted]) -> None:
        for state, a in zip(self.rows, accepted, strict=True):
            if state is not None:
                state.accept(a.token)

    def inputs(self, params: Sequence[SamplingParams], rows: Rows, indices: Sequence[int]) -> dict[str, mx.array]:
        words = mask_words(self.ctx.vocab)
        bits = np.full((len(rows.rows), words), -1, dtype=np.int32)
        for k, r in enumerate(rows.rows):
            state = self.rows[r]
            if state is not None:
                bits[k] = state.next_mask(words)
        return {MASK: mx.array(bits)}

    def carry(self, row: int) -> Any:
        state = self.rows[row]
        return None if state is None else (state.grammar, state.consumed)

    def mark(self) -> Any:
        # llguidance's own copy of a matcher's parse state (a rollback cannot undo a token
        # that left the grammar).
        return [None if r is None else replace(r, matcher=r.matcher.deep_copy()) for r in self.rows]

    def rewind(self, mark: Any) -> None:
        self.rows = [None if r is None else replace(r, matcher=r.matcher.deep_copy()) for r in mark]

    def advance(self, tokens: mx.array, leaving: Sequence[int | None]) -> None:
        raise NotImplementedError

    def facts(self, row: int) -> GrammarFacts | None:
        """Row ``row``'s grammar after its last token (None: the row has no grammar)."""
        state = self.rows[row]
        return None if state is None else GrammarFacts(state.accepting(), state.left)


def _row(ctx: StateContext, params: SamplingParams, history: Sequence[int], carry: Any) -> GrammarRow | None:
    if not params.grammar:
        return None
    state = GrammarRow(params.grammar, ctx.vocabulary.matcher(params.grammar))
    # The same grammar reads the tokens it had read again; another one starts here (a fork's
    # variant with its own grammar, a continuation under a new one).
    read = min(carry[1], len(history)) if carry is not None and tuple(carry[0]) == params.grammar else 0
    for token in history[len(history) - read :] if read > 0 else ():
        state.accept(token)
    return state


def _state(ctx: StateContext, params: Sequence[SamplingParams], histories, carries: Sequence[Any]) -> GrammarRows:
    return GrammarRows(ctx, [_row(ctx, p, h, c) for p, h, c in zip(params, histories, carries, strict=True)])


def _prepare(ctx: StateContext, params: SamplingParams) -> None:
    # The tokenizer's part of the grammar (and llguidance's tokenizer, at the first one),
    # refused as the grammar's fault.
    if params.grammar:
        try:
            ctx.vocabulary.matcher(params.grammar)
        except (ValueError, GrammarUnavailable) as exc:
            raise SamplingParamsError("grammar", params.grammar, str(exc)) from None


STAGE = Stage(SPEC, _apply, state=_state, prepare=_prepare, statistics=_statistics, statistics_width=len(STATISTICS))
