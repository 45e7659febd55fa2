"""What a server cannot do itself, behind the same calls as the local engine's.

A server has no fork: :class:`ForkEmulation` (held by
:class:`engine.remote.backend.RemoteBackend`, whose ``fork`` and ``fork_reply`` use it) starts
one stream per variant, together, each continuing the reply's text where there is one; no
``Divergence`` events (those need whole distributions, which no server sends). Scoring,
replay, the fidelity check, model comparison and the logit lens need the model's whole
distribution or its layers, which a server does not give: those calls raise
:class:`Refused`, with the reason the backend's ``capabilities`` declare.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from engine.api.backend import Messages, StartedRequest
from engine.api.capabilities import Capabilities
from engine.api.errors import EngineError
from engine.api.params import SamplingParams
from engine.remote.events import RemoteRequest


class RequestStarter(Protocol):
    """What :class:`ForkEmulation` needs of the backend: checking and starting one request."""

    def check_request(self, req: RemoteRequest) -> None:
        """Refuse what the server cannot take, before anything starts."""
        ...

    def begin(self, messages: Messages, params: SamplingParams, prefix: str, index: int, forced) -> StartedRequest: ...


class ForkEmulation:
    def __init__(self, starter: RequestStarter) -> None:
        self._starter = starter

    def fork(self, messages: Messages, variants: Sequence[SamplingParams], prefix: str, index: int) -> list:
        """One stream per variant, continuing ``prefix`` (the reply's first ``index`` tokens).
        Every variant is checked first, so one the server cannot take starts none."""
        for params in variants:
            self._starter.check_request(RemoteRequest(-1, tuple(messages), params, prefix, index))
        return [self._starter.begin(messages, params, prefix, index, None) for params in variants]


class Refused:
    """A ``Backend`` call a server cannot serve, as a class attribute of the backend: calling it
    raises :func:`refused` for capability ``name`` (``score_text = Refused("score")``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, backend: Any, owner: type | None = None) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise refused(backend.capabilities, self.name)

        return call


def refused(capabilities: Capabilities, name: str) -> EngineError:
    """The error for a call a server cannot serve: capability ``name``'s declared reason."""
    reason = capabilities.reason(name)
    return EngineError(f"{name}: {reason}" if reason else f"{name} is not available.")


__all__ = ["ForkEmulation", "Refused", "RequestStarter", "refused"]
