"""Scored texts in the model layer (Qt-free).

File → Score text… adds a turn to a new conversation whose "reply" is the given text, scored
teacher-forced: the worker runs a :class:`ScoreJob` and reports its TokenSteps (``forced``,
with ``rank``) under the reply's tag exactly as it reports a generated reply, so the chat
view colours it, the inspector and the timeline show every token, and it is saved as a
branch (``FinishReason.SCORED``) that exports like any other. A replay of a saved reply
under other settings is ``app.model.replay``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.model.jobs import Messages
from app.store.scored_labels import IMPORTED_LABEL, SCORE_LABEL
from engine.api.events import TokenStep
from engine.api.params import SamplingParams


@dataclass(frozen=True)
class ScoreJob:
    """Score ``text``; with ``prompt`` it is the assistant's reply to those messages."""

    tag: int
    text: str
    params: SamplingParams
    prompt: Messages | None = None


def is_scored(step: TokenStep) -> bool:
    """A token of a scored text (given, not drawn; ``rank`` is set only there)."""
    return step.rank is not None


def shading_logprob(step: TokenStep) -> float | None:
    """What the chat shades a token by: for a scored text the raw model distribution, the
    one its perplexity and surprisal come from (after the whole chain, XTC's coin and
    truncations would read a likely token as impossible); for a drawn token the
    distribution it was drawn from (after the last stage)."""
    return step.raw_logprob if is_scored(step) else step.logprob


def shown_kinds(entries: Iterable) -> tuple[bool, bool]:
    """Whether the chat's ``entries`` hold (scored tokens, drawn tokens): the colour legend
    names the distribution of each kind shown."""
    scored = drawn = False
    for entry in entries:
        for steps in [entry.steps, *(c.steps for c in entry.columns)]:
            # A branch continued from a scored text: its scored tokens first, drawn ones after.
            for step in steps[:1] + steps[-1:]:
                scored |= is_scored(step)
                drawn |= not is_scored(step)
    return scored, drawn


def score_context(user_turn: str, scored: str) -> str:
    """The text before a prompt-less scored text's first scored token: its first token,
    the context it was read from and which has no probability of its own ("The" of "The
    Eiffel Tower is…"). Read from the user turn (``score_label``: the start of the text's
    first line) and the scored tokens' text so far, which may be only their start while
    the text streams. "" for a turn that is no such label or a text scored whole (a BOS
    was its context)."""
    if not user_turn.startswith(SCORE_LABEL) or not scored:
        return ""
    line = user_turn[len(SCORE_LABEL) :]
    for k in range(len(line)):
        rest = line[k:]
        if scored.startswith(rest) or rest.startswith(scored):
            return line[:k]
    return ""


def score_prompt(user_turn: str) -> str | None:
    """The prompt a scored text answers, read back from its user turn (None: scored without one)."""
    return None if user_turn.startswith(SCORE_LABEL) or user_turn == IMPORTED_LABEL else user_turn
