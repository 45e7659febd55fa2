"""Speculative decoding from the app's side (Qt-free): what the draft did at each token.

With a draft model (Models → Draft model…) the engine keeps the running model's own draw at
every token and records what the draft had proposed there (``engine.api.draft``). This module
turns those records into what the views show: each token's outcome and its words, the
inspector's *Draft* tab (both models' candidates side by side), the timeline's acceptance
row (``DraftAcceptance``, a step analysis), the chat's colours by outcome, and the draft
chosen for each running model (saved per model, as the precision is).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.model.reply_analysis import StepAnalysis
from app.model.textfmt import percent
from app.store.compare_runs import StreamKey
from engine.api.draft import (
    DEFAULT_DRAFT_TOKENS,
    MAX_DRAFT_TOKENS,
    Coupling,
    DraftRecord,
    Outcome,
    classic_accept_probability,
)
from engine.api.events import TokenStep

OUTCOME_WORDS = {
    Outcome.ACCEPTED: "accepted: the draft proposed the model's own draw",
    Outcome.REJECTED: "rejected: the model drew another token",
    Outcome.BONUS: "bonus: the model's extra token after a whole block was accepted",
}
OUTCOME_SHORT = {Outcome.ACCEPTED: "accepted", Outcome.REJECTED: "drawn after a rejection", Outcome.BONUS: "bonus"}
COUPLING_WORDS = {
    Coupling.GREEDY: "took its most likely token, as the draft did, and drew",
    Coupling.SHARED_NOISE: "drew with the same random noise as the draft",
}
"""How the model's draw was made beside the draft's (``engine.api.draft.Coupling``)."""
NO_DRAFT = "no draft here (the reply's first token, or a step without a block)"


def outcome_of(step: TokenStep) -> Outcome | None:
    return step.draft.outcome if step.draft is not None else None


def has_drafts(steps: Sequence[TokenStep]) -> bool:
    return any(s.draft is not None for s in steps)


def shows_drafts(entries: Iterable) -> bool:
    """Whether the chat's ``entries`` hold a reply written with a draft model (its first token
    has no record, a plain step may end it: a few from each end are read, not every step)."""
    for entry in entries:
        for steps in [entry.steps, *(c.steps for c in entry.columns)]:
            if any(s.draft is not None for s in [*steps[1:4], *steps[-3:]]):
                return True
    return False


# The inspector's Draft tab ------------------------------------------------------------------


@dataclass(frozen=True)
class DraftRow:
    """One token in the tab: its probability under the draft (q) and the model (p)."""

    token_id: int
    text: str
    q: float | None
    """None: not among the draft's candidates here."""
    p: float | None
    """None: not known (outside the model's candidates and the draft's)."""
    proposed: bool
    drawn: bool

    @property
    def classic_accept_probability(self) -> float | None:
        """min(1, p / q): how likely classic speculative sampling would keep it, had the draft
        proposed it (not the engine's rule: ``engine.api.draft.Coupling``)."""
        return classic_accept_probability(self.p, self.q)


def draft_rows(step: TokenStep) -> list[DraftRow]:
    """The draft's candidates and the model's, one row per token, the most likely under either
    first; the draft's proposal and the model's draw marked."""
    record = step.draft
    if record is None:
        return []
    texts: dict[int, str] = {}
    q: dict[int, float | None] = {}
    p: dict[int, float | None] = {}
    for c in record.top:  # q, and p as the engine read it for the draft's candidates
        texts[c.token_id], q[c.token_id], p[c.token_id] = c.text, _p(c.logprob), _p(c.target_logprob)
    for c in step.top:  # the model's own candidates: p from its step
        if c.token_id is not None:
            texts[c.token_id], p[c.token_id] = c.text, _p(c.logprob)
    rows = [DraftRow(t, texts[t], q.get(t), p.get(t), t == record.token_id, t == step.token_id) for t in texts]
    return sorted(rows, key=lambda r: -max(r.q or 0.0, r.p or 0.0))


def _p(logprob: float | None) -> float | None:
    return None if logprob is None else math.exp(logprob)


def draft_header(step: TokenStep) -> str:
    """The tab's first line: what happened here and why (plain text)."""
    record = step.draft
    if record is None:
        return NO_DRAFT
    where = f"token {record.position + 1} of a block of {record.block}"
    if record.outcome is Outcome.BONUS:
        return f"Bonus ({where} + 1): every proposal of the block was accepted, so the model's pass gave one more."
    verdict = OUTCOME_WORDS[record.outcome]
    drew = COUPLING_WORDS.get(record.coupling, "drew")
    kept = "kept" if record.kept else "not kept: the model's own draw stands"
    return (
        f"{verdict.capitalize()} ({where}). The draft drew “{_text(record, step)}” "
        f"(q {percent(record.logprob)}, p {percent(record.target_logprob)}); the model {drew} "
        f"“{step.piece}”: {kept}. Classic speculative sampling would keep the proposal with "
        f"min(1, p/q) {fraction(record.classic_accept_probability)}; the rule here keeps it only when both "
        "draws agree."
    )


def _text(record: DraftRecord, step: TokenStep) -> str:
    for c in record.top:
        if c.token_id == record.token_id:
            return c.text
    return step.piece if record.token_id == step.token_id else f"#{record.token_id}"


def fraction(value: float | None) -> str:
    """min(1, p/q) as the tab and its header write it ("—": not known)."""
    return "—" if value is None else f"{value:.2f}"


# The timeline's acceptance row ----------------------------------------------------------------


@dataclass(frozen=True)
class TokenAcceptance:
    index: int
    outcome: Outcome | None
    rate: float
    """The reply's acceptance rate up to this token (accepted / proposals checked); NaN before any."""


@dataclass(frozen=True)
class ReplyAcceptance:
    stream: StreamKey
    output: tuple[int | None, ...]
    rows: tuple[TokenAcceptance, ...]
    proposed: int
    accepted: int
    passes: int
    drafted: int
    """Tokens the passes gave (the tokens with a draft record)."""

    def at(self, position: int) -> TokenAcceptance | None:
        return self.rows[position] if 0 <= position < len(self.rows) else None

    def summary(self) -> str:
        if not self.proposed:
            return "no draft proposals in this reply"
        per_pass = self.drafted / self.passes if self.passes else 0.0
        return (
            f"acceptance {self.accepted / self.proposed:.0%} ({self.accepted} of {self.proposed} proposals) · "
            f"{per_pass:.2f} tokens per pass of the model"
        )


def acceptance(stream: StreamKey, steps: Sequence[TokenStep]) -> ReplyAcceptance:
    rows, proposed, accepted, passes, drafted = [], 0, 0, 0, 0
    for step in steps:
        outcome = outcome_of(step)
        if outcome is not None:
            drafted += 1
            passes += step.draft.position == 0
            if outcome is not Outcome.BONUS:
                proposed += 1
                accepted += outcome is Outcome.ACCEPTED
        rows.append(TokenAcceptance(step.index, outcome, accepted / proposed if proposed else math.nan))
    return ReplyAcceptance(stream, tuple(s.token_id for s in steps), tuple(rows), proposed, accepted, passes, drafted)


class DraftAcceptance(StepAnalysis[ReplyAcceptance]):
    TITLE = "Draft acceptance of every token"
    TIP = (
        "A timeline row: for a reply written with a draft model, each token's outcome (accepted, "
        "drawn by the model after a rejection, bonus) and the running acceptance rate."
    )
    select_hint = "Select a token of a reply written with a draft model: its acceptance shows in the timeline."

    def compute(self, stream: StreamKey, steps: Sequence[TokenStep]) -> ReplyAcceptance:
        return acceptance(stream, steps)


# The draft chosen for each running model -------------------------------------------------------


@dataclass(frozen=True)
class DraftChoice:
    source: str
    precision: str = "auto"
    tokens: int = DEFAULT_DRAFT_TOKENS

    def to_json(self) -> dict:
        return {"source": self.source, "precision": self.precision, "tokens": self.tokens}

    @classmethod
    def from_json(cls, data: object) -> DraftChoice | None:
        """None for anything that is not a saved choice (an older app's value, a hand edit)."""
        if not isinstance(data, dict) or not isinstance(data.get("source"), str) or not data["source"]:
            return None
        tokens = data.get("tokens", DEFAULT_DRAFT_TOKENS)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_DRAFT_TOKENS:
            tokens = DEFAULT_DRAFT_TOKENS
        precision = data.get("precision") if isinstance(data.get("precision"), str) else "auto"
        return cls(data["source"], precision, tokens)


DRAFT_KEY = "draft_models"


class DraftChoices:
    """The draft chosen for each running model (by its source), saved as one JSON object
    under one settings key (as ``app.model.per_model`` saves the precision): anything
    unreadable reads as nothing saved, so a damaged setting never stops a load."""

    def __init__(self, settings) -> None:
        self.settings = settings  # anything with QSettings' value / setValue

    def _all(self) -> dict[str, dict]:
        try:
            data = json.loads(self.settings.value(DRAFT_KEY, "{}") or "{}")
        except (TypeError, ValueError):
            return {}
        return {str(k): v for k, v in data.items() if DraftChoice.from_json(v)} if isinstance(data, dict) else {}

    def get(self, target: str | None) -> DraftChoice | None:
        return DraftChoice.from_json(self._all().get(target or ""))

    def set(self, target: str, choice: DraftChoice | None) -> None:
        saved = {k: v for k, v in self._all().items() if k != target}
        if choice is not None:
            saved[target] = choice.to_json()
        self.settings.setValue(DRAFT_KEY, json.dumps(saved))
