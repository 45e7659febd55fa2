"""What the store hands out: a conversation, its messages and their reply branches, as plain
dataclasses.

In a module of their own so that :mod:`app.store.store` (the connection) and the modules
that read and write the rows (:mod:`app.store.queries`, :mod:`app.store.writes`) share them
without importing each other; callers import them from :mod:`app.store.store` as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.api.events import TokenStep
from engine.api.params import SamplingParams


@dataclass
class Branch:
    id: int
    text: str
    finish_reason: str | None
    model: str
    params: SamplingParams
    steps: list[TokenStep]
    model_source: str | None = None
    precision: str | None = None
    """What it was computed in (``float32``, ``float16``, ``bfloat16``); None: not recorded."""
    backend: str | None = None
    """Where it was computed: ``local``, or ``remote:<server kind>:<stage>:detected|set``
    (``app.model.reply_origin``); None: not recorded (saved before schema 7)."""


@dataclass
class Message:
    id: int
    role: str
    content: str = ""
    branches: list[Branch] = field(default_factory=list)
    active: int = 0  # index into branches

    @property
    def branch(self) -> Branch | None:
        return self.branches[self.active] if self.branches else None


@dataclass
class Conversation:
    id: int
    title: str
    system_prompt: str


@dataclass
class ConversationSummary:
    """What tells a conversation apart in a list: when it was last written to, by which
    model, and how long it is."""

    id: int
    title: str
    updated_at: float
    """Seconds since the epoch."""
    model: str | None
    """The model of its latest reply; None before the first."""
    turns: int
    """Messages sent (in every branch)."""
    tokens: int
    """Tokens of the replies shown (each reply's active branch)."""
