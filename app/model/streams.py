"""A reply being written: the stream (``app.store.compare_runs.StreamKey``) the model layer
holds besides the stored thread. When a reply is saved its stream is renamed to the new
branch and the model moves the selection with it."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.store.compare_runs import CompareRun, StreamKey, reply_key
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams


@dataclass(eq=False)
class Reply:
    """A reply being written: the tokens kept from where it starts, then the new ones."""

    id: int
    """Stable, and the worker's tag for the request."""
    message_id: int
    params: SamplingParams
    steps: list[TokenStep] = field(default_factory=list)
    """Kept tokens first (``prefix_len`` of them), then each new token as it arrives."""
    prefix_len: int = 0
    run: CompareRun | None = None
    column: int = 0
    request_id: int | None = None
    finished: Finished | None = None
    served_in: int | None = None
    """A served request's reply (``app.model.served``): its conversation, which may not be
    the one open; None for the app's own replies, always the open conversation's."""

    @property
    def key(self) -> StreamKey:
        return reply_key(self.id)

    @property
    def new_steps(self) -> list[TokenStep]:
        return self.steps[self.prefix_len :]
