"""The surprise of every drawn token under the model's own distribution (Qt-free): how many
bits of surprise the token carried under ``raw`` (the model's logits before any sampling
stage, ``-log2 p``), and its rank there (1: the model's most likely token) — where the
sampler drew something the model did not expect. Computed from the reply's own steps
(``TokenStep.logprobs`` and ``top``), so it needs no model and no job: a
:class:`app.model.reply_analysis.StepAnalysis`.

The rank is exact where it can be known from what a step holds: a scored text's step records
it (``TokenStep.rank``); otherwise it is one more than the number of candidates more likely
than the token, when the token is among the step's candidates (``top``: the most likely
ones under ``raw``). A token outside them ranks below all of them: its rank is None (the
view writes ``>k``, ``k`` the candidates held).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.model.reply_analysis import StepAnalysis
from app.store.compare_runs import StreamKey
from engine.api.events import TokenStep

LN2 = math.log(2)
WORST = 5
"""The tokens the row labels: the most surprising ones the model did not rank first."""


@dataclass(frozen=True)
class TokenSurprise:
    index: int
    bits: float
    """``-log2 p`` of the drawn token under ``raw``; NaN where a server did not report it."""
    rank: int | None
    """1 = the model's most likely token; None: outside the step's ``held`` candidates."""
    held: int
    """How many candidates the step held (a rank of None is ``> held``)."""

    @property
    def unexpected(self) -> bool:
        """The model did not rank it first."""
        return self.rank != 1


@dataclass(frozen=True)
class ReplySurprise:
    stream: StreamKey
    output: tuple[int | None, ...]
    rows: tuple[TokenSurprise, ...]

    def at(self, position: int) -> TokenSurprise | None:
        return self.rows[position] if 0 <= position < len(self.rows) else None

    def worst(self, k: int = WORST) -> list[TokenSurprise]:
        """The ``k`` most surprising tokens the model did not rank first, the most first."""
        known = [r for r in self.rows if r.unexpected and math.isfinite(r.bits)]
        return sorted(known, key=lambda r: (-r.bits, r.index))[:k]


def token_surprise(step: TokenStep) -> TokenSurprise:
    raw = step.logprobs[0] if step.logprobs else None
    bits = -raw / LN2 if raw is not None else math.nan
    held = len(step.top)
    if step.rank is not None:
        return TokenSurprise(step.index, bits, step.rank, held)
    if raw is None or not any(c.token_id == step.token_id for c in step.top):
        return TokenSurprise(step.index, bits, None, held)
    others = (c.logprobs[0] for c in step.top if c.token_id != step.token_id)
    above = sum(1 for lp in others if lp is not None and lp > raw)
    return TokenSurprise(step.index, bits, above + 1, held)


class SurpriseAnalysis(StepAnalysis[ReplySurprise]):
    TITLE = "Surprise of every token"
    TIP = (
        "A timeline row: how surprising each token of the selected reply was to the model "
        "itself (bits, under its raw distribution), the tokens it did not rank first ringed."
    )
    select_hint = "Select a token of a reply: its surprise under the model's own distribution shows in the timeline."

    def compute(self, stream: StreamKey, steps: Sequence[TokenStep]) -> ReplySurprise:
        rows = tuple(token_surprise(s) for s in steps)
        return ReplySurprise(stream, tuple(s.token_id for s in steps), rows)
