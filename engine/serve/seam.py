"""What the HTTP server needs of an engine (no MLX): ``python -m engine serve``'s own thread
(``engine.serve.engine_loop.EngineLoop``) provides it, and so can an app that serves the model
it runs through its own worker."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from engine.api.backend import ModelInfo
from engine.api.events import Event
from engine.serve.request_fields import ServedRequest

Sink = Callable[[Event], None]
"""Where a request's events go, called on the engine's thread."""


class ServingEngine(Protocol):
    info: ModelInfo

    def submit(self, request: ServedRequest, sink: Sink) -> Future:
        """Start ``request``: its id through the future (or the engine's refusal), then each of
        its events to ``sink``, its ``Finished`` last."""
        ...

    def cancel(self, request_id: int) -> None: ...

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes (``logprobs``' ``bytes``)."""
        ...
