"""The timeline's *masked by grammar* row from the app's side (Qt-free): for a reply written
under a grammar (Structured output, ``app.model.structured``), the probability the grammar
removed at each token, its overrides of the model's first choice and its forced tokens
(``GrammarMasks``, a step analysis; the row: ``app.views.grammar_timeline``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.model.reply_analysis import StepAnalysis
from app.store.compare_runs import StreamKey
from engine.api.events import TokenStep


@dataclass(frozen=True)
class TokenMask:
    index: int
    removed: float
    """Of the distribution entering the grammar; NaN: no grammar at this token."""
    removed_raw: float
    overridden: bool
    forced: bool


@dataclass(frozen=True)
class ReplyMasks:
    stream: StreamKey
    output: tuple[int | None, ...]
    rows: tuple[TokenMask, ...]
    constrained: int
    """Tokens written under a grammar."""
    overrides: int
    forced: int
    log_kept: float
    """Σ log(1 − removed_raw): the log-probability that the model would have stayed inside."""

    def at(self, position: int) -> TokenMask | None:
        return self.rows[position] if 0 <= position < len(self.rows) else None

    def summary(self) -> str:
        if not self.constrained:
            return "no token of this reply was written under a grammar"
        kept = math.exp(self.log_kept) if self.log_kept > -700 else 0.0
        return (
            f"{self.overrides} override{'s' if self.overrides != 1 else ''} of the model's first choice · "
            f"{self.forced} forced · the model alone stays inside with p {kept:.2g}"
        )


def masks(stream: StreamKey, steps: Sequence[TokenStep]) -> ReplyMasks:
    rows, overrides, forced, log_kept, constrained = [], 0, 0, 0.0, 0
    for step in steps:
        record = step.grammar
        if record is None or record.left:
            rows.append(TokenMask(step.index, math.nan, math.nan, False, False))
            continue
        constrained += 1
        overrides += record.overridden
        forced += record.forced
        kept = 1.0 - record.removed_raw
        log_kept += math.log(kept) if kept > 0 else -math.inf
        rows.append(TokenMask(step.index, record.removed, record.removed_raw, record.overridden, record.forced))
    return ReplyMasks(stream, tuple(s.token_id for s in steps), tuple(rows), constrained, overrides, forced, log_kept)


class GrammarMasks(StepAnalysis[ReplyMasks]):
    TITLE = "Mass masked by the grammar at every token"
    TIP = (
        "A timeline row: for a reply written under a grammar (Structured output), the probability the "
        "grammar removed at each token, with the tokens where it overrode the model's first choice."
    )
    select_hint = "Select a token of a reply written under a grammar: its masks show in the timeline."

    def compute(self, stream: StreamKey, steps: Sequence[TokenStep]) -> ReplyMasks:
        return masks(stream, steps)
