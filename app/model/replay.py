"""Replay a stored reply under other settings (Qt-free): what they would have done to it.

The engine re-scores the reply's own tokens teacher-forced through the new chain
(``EngineSession.replay``): the raw logits depend only on the tokens, so every stage's
distribution under the new settings is exact. :func:`compare` sets that beside the
original: the chosen token's probability under the new settings, the positions where they
would have removed it, and those where their most likely token differs from the original
settings' most likely token. :attr:`Replay.first_change` is where a branch would start.
The worker runs a :class:`ReplayJob`; its steps go to a :class:`ReplayRun`, not to the
conversation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.model.jobs import Messages
from engine.api.events import ScoreDone, TokenStep
from engine.api.params import SamplingParams


def top_token(step: TokenStep) -> int:
    """The most likely token after the last stage (ties: the first in raw rank)."""
    best = max(step.top, key=lambda c: c.logprobs[-1])
    return best.token_id


@dataclass(frozen=True)
class ReplayJob:
    """A saved reply (``output`` after ``messages``) through the chain under ``params``."""

    tag: int
    messages: Messages
    output: tuple[int, ...]
    params: SamplingParams
    text: str | None = None
    """A text scored without a prompt, whole: replayed as it was scored, its first token the
    context (``EngineSession.replay_text``); rendered as a chat it read another text."""


@dataclass
class ReplayRun:
    tag: int
    stream: tuple
    params: SamplingParams
    steps: list[TokenStep] = field(default_factory=list)
    done: ScoreDone | None = None


@dataclass
class Replay:
    params: SamplingParams
    steps: list[TokenStep]
    chosen_prob: list[float] = field(default_factory=list)
    """exp(logprob after the last new stage) of the reply's token at each position (0 if removed)."""
    removed: list[int] = field(default_factory=list)
    """Positions whose token the new settings would have removed (and the stage that did)
    where the original settings kept it: a scored text's token the original chain removed
    too (a text is given, not drawn) is no change."""
    removed_by: dict[int, str] = field(default_factory=dict)
    removed_too: list[int] = field(default_factory=list)
    """Positions whose token the new settings remove and the original settings removed too
    (a scored text's given token): no change, but the curve is at 0 there, so they are
    counted and marked apart from :attr:`removed`."""
    differs: list[int] = field(default_factory=list)
    """Positions where the new settings' most likely token is not the original settings'."""
    new_top: list[int] = field(default_factory=list)

    @property
    def first_change(self) -> int | None:
        found = sorted(set(self.removed) | set(self.differs))
        return found[0] if found else None


def compare(original: list[TokenStep], replayed: list[TokenStep], params: SamplingParams) -> Replay:
    out = Replay(params, list(replayed))
    for old, new in zip(original, replayed, strict=False):
        lp = new.logprobs[-1]
        out.chosen_prob.append(math.exp(lp) if lp != -math.inf else 0.0)
        chosen = next((c for c in new.top if c.token_id == new.token_id), None)
        if lp == -math.inf:
            out.removed_by[new.index] = chosen.removed_by if chosen is not None and chosen.removed_by else "?"
            (out.removed if old.logprobs[-1] != -math.inf else out.removed_too).append(new.index)
        top = top_token(new)
        out.new_top.append(top)
        if top != top_token(old):
            out.differs.append(new.index)
    return out
