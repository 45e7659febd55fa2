"""What the serving tests share: a server on 127.0.0.1 over the tiny model (real HTTP), the
same request run by the engine here without a server, and raw reads of a stream."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.serve.engine_loop import EngineLoop
from engine.serve.limits import ServeLimits
from engine.serve.server_thread import ServerThread
from engine.session.session import EngineSession

CHAT = [{"role": "user", "content": "Tell me about the sea."}]
KEY = "test-key-123"
JSON = {"Content-Type": "application/json"}
HANG_GUARD_S = 120
"""A hang guard, not a speed assert: far above what any request here takes."""


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (polled), failing as a hang guard past ``HANG_GUARD_S``."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"hang guard: {what} never happened"
        threading.Event().wait(0.01)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """An ``EngineLoop`` over the tiny model served on 127.0.0.1 (any free port)."""

    def __init__(self, folder, api_key: str | None = None, limits: ServeLimits | None = None) -> None:
        def load() -> EngineSession:
            session = EngineSession(max_batch_size=8)
            session.load(str(folder))
            return session

        self.engine = EngineLoop(load)
        self.session = self.engine.session
        self.server = ServerThread(self.engine, "127.0.0.1", 0, api_key, limits)  # port 0: any free one
        self.port, self.url = self.server.port, self.server.url
        # Paused (``pause``), the engine's thread waits before its next step: a reply that
        # cannot end on its own while a test acts on it, whatever the machine's speed.
        self.stepping = threading.Event()
        self.stepping.set()
        step = self.session.step

        def gated_step():
            self.stepping.wait(HANG_GUARD_S)
            return step()

        self.session.step = gated_step

    def pause(self) -> None:
        self.stepping.clear()

    def resume(self) -> None:
        self.stepping.set()

    def no_eos(self) -> dict[str, float]:
        """A ``logit_bias`` that bans the end of the reply: a stream that runs until stopped."""
        return {str(t): -100 for t in self.session.info.eos_token_ids}

    def close(self) -> None:
        self.resume()
        self.server.stop(timeout=30)
        self.engine.close()


def local(tiny_folder, params: SamplingParams, messages=CHAT, prompt: str | None = None) -> list[TokenStep]:
    """The same request run by the engine here, without the server: its steps."""
    session = EngineSession()
    session.load(str(tiny_folder))
    if prompt is None:
        rid = session.start(messages, params).request_id
    else:
        from engine.runtime.prompts import encode_text

        rid = session.scheduler.insert(encode_text(session.scheduler.loaded.tokenizer, prompt), params)
    steps = []
    while session.has_work():
        steps += [e for e in session.step() if isinstance(e, TokenStep) and e.request_id == rid]
    eos = set(session.info.eos_token_ids)
    return [s for s in steps if s.token_id not in eos]


def events_of(lines: Iterator[str]) -> Iterator[dict | str]:
    """A stream's server-sent events: each ``data:`` line's JSON, or ``"[DONE]"``."""
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ")
        yield data if data == "[DONE]" else json.loads(data)


def is_openai_error(body: object) -> bool:
    """Whether ``body`` is OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``."""
    return (
        isinstance(body, dict)
        and set(body) == {"error"}
        and set(body["error"]) == {"message", "type", "param", "code"}
        and bool(body["error"]["message"])
    )


def post(url: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(url, json=body, timeout=HANG_GUARD_S, **kw)
