"""Logitscope's HTTP server on a thread of its own (uvicorn, its event loop there): what the
app runs beside its window, and the tests beside an engine (``python -m engine serve`` runs
uvicorn on its main thread instead)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine.serve.address import bind
from engine.serve.http import make_app
from engine.serve.limits import ServeLimits
from engine.serve.seam import Refused, ServingEngine

START_TIMEOUT_S = 10.0
GRACE_S = 2
"""Seconds a stop waits for open streams (each ends with an error event) to end."""


class ServerThread:
    """Serves ``engine`` on ``host:port`` from now until :meth:`stop`, within ``limits``
    (``on_refused``: ``engine.serve.http.make_app``'s). The
    socket is bound here, on the caller's thread: a port in use raises ``OSError`` at once."""

    def __init__(
        self,
        engine: ServingEngine,
        host: str,
        port: int,
        api_key: str | None = None,
        limits: ServeLimits | None = None,
        on_refused: Callable[[Refused], object] | None = None,
    ) -> None:
        from engine.serve.listener import make_server

        sock = bind(host, port)
        self.host, self.port = host, sock.getsockname()[1]
        self.limits = limits or ServeLimits()
        app = make_app(engine, api_key, self.limits, host, on_refused)
        self._server = make_server(app, self.limits, app.state.live.stop_all, GRACE_S)
        self._failure: BaseException | None = None

        def run() -> None:
            try:
                self._server.run(sockets=[sock])
            except BaseException as exc:  # noqa: BLE001 - uvicorn exits with SystemExit on failure
                self._failure = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name="logitscope-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            self.stop()
            raise OSError(f"the server did not start on {host}:{self.port}: {self._failure or 'timed out'}.")

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving: open streams end with an error event, then the server closes."""
        self._server.should_exit = True
        self._thread.join(timeout)
