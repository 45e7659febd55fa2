"""uvicorn as Logitscope's server runs it: with :class:`engine.serve.limits.ServeLimits` and
streams that end with an error when the server stops.

uvicorn times out an idle kept-alive connection but not one that never finishes its
request's headers: a client that sends half a request line would hold its socket for as long
as it likes. :class:`HeaderTimedH11` closes a connection whose request line and headers take
longer than ``header_timeout_s``. On a stop, uvicorn lets open responses run out before it
closes their connections; :class:`Server` first tells the application (``on_stop``), whose
streams then end with an error event their clients can tell from a finish.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.serve.guard import error_response
from engine.serve.limits import ServeLimits


class HeaderTimedH11(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for a request's line and headers: armed while
    the connection waits for a request and has begun one, or has just opened (an idle kept-alive
    connection is uvicorn's keep-alive timeout's). Past ``max_connections`` a request is a 503
    in OpenAI's shape with ``Retry-After`` (uvicorn's own ``limit_concurrency`` answers plain
    text), counted as uvicorn counts: connections, and requests being answered."""

    header_timeout_s = ServeLimits.header_timeout_s
    max_connections = ServeLimits.max_connections

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limit_concurrency = None  # checked by ``_limited`` instead, in OpenAI's shape
        self.app = self._limited(self.app)

    def _limited(self, app: Any) -> Any:
        async def limited(scope: Any, receive: Any, send: Any) -> None:
            # Its own task is counted already: uvicorn checks before it makes it.
            if len(self.connections) > self.max_connections or len(self.tasks) > self.max_connections:
                refusal = error_response(
                    503,
                    f"the server is answering {self.max_connections} connections already; try again shortly.",
                    kind="server_error",
                    code="too_many_connections",
                    headers={"Retry-After": "1", "Connection": "close"},
                )
                await refusal(scope, receive, send)
                return
            await app(scope, receive, send)

        return limited

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._headers_due: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if not waiting:
            self._disarm()
        elif self._headers_due is None:
            self._headers_due = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)

    def _disarm(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _headers_timed_out(self) -> None:
        self._headers_due = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class Server(uvicorn.Server):
    """uvicorn's server, calling ``on_stop`` (on its event loop) before it stops."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop = on_stop

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_stop()
        await super().shutdown(sockets)


def make_server(app: Any, limits: ServeLimits, on_stop: Callable[[], None], grace_s: float | None = None) -> Server:
    """A uvicorn server of ``app`` under ``limits``; ``grace_s``: how long a stop waits for
    open responses (None: as long as they take)."""
    settings = {"header_timeout_s": limits.header_timeout_s, "max_connections": limits.max_connections}
    protocol = type("LimitedH11", (HeaderTimedH11,), settings)
    config = uvicorn.Config(
        app,
        http=protocol,
        log_level="warning",
        timeout_keep_alive=int(max(1, round(limits.keep_alive_s))),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=None if grace_s is None else int(max(1, round(grace_s))),
    )
    return Server(config, on_stop)


__all__ = ["HeaderTimedH11", "Server", "make_server"]
