"""What the HTTP server needs of an engine (no MLX): ``python -m engine serve``'s own thread
(``engine.serve.engine_loop.EngineLoop``) provides it, and so can an app that serves the model
it runs through its own worker."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from engine.api.backend import ModelInfo
from engine.api.events import Event, Finished, ScoreDone
from engine.serve.request_fields import ServedRequest

Sink = Callable[[Event], None]
"""Where a request's events go, called on the engine's thread."""


@dataclass(frozen=True)
class Refused:
    """A completion request refused with a 400 before the engine was given it: who sent it,
    to which endpoint, its body when it was JSON (else None), and the error it was sent."""

    client: str
    chat: bool
    body: Any
    message: str
    param: str | None = None


def deliver(sinks: dict[int, Sink], event: Event) -> bool:
    """Hand ``event`` to its request's sink in ``sinks`` (request id -> sink), on the engine's
    thread; its ``Finished`` ends the request's entry. False when no sink takes it (another
    request's event, a ``ScoreDone``). A sink whose event loop is gone (the server stopped)
    is passed over: its client is gone with it."""
    sink = sinks.get(getattr(event, "request_id", None))
    if sink is None or isinstance(event, ScoreDone):
        return False
    with contextlib.suppress(RuntimeError):
        sink(event)
    if isinstance(event, Finished):
        del sinks[event.request_id]
    return True


class ServingEngine(Protocol):
    info: ModelInfo

    def submit(self, request: ServedRequest, sink: Sink) -> Future:
        """Start ``request``: its id through the future (or the engine's refusal), then each of
        its events to ``sink``, its ``Finished`` last."""
        ...

    def prepare(self, request: ServedRequest) -> ServedRequest:
        """``request`` made ready to start, on the HTTP server's threads (its prompt tokenized,
        its grammar compiled: the work no stream should wait for on the engine's thread), or a
        ``FieldError`` (a prompt past the model's context). An engine that does this work
        where it starts a request returns ``request`` as it is."""
        ...

    def cancel(self, request_id: int) -> None: ...

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes (``logprobs``' ``bytes``)."""
        ...
