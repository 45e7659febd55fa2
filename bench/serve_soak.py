"""Figure 28: the server's memory under a mixed load, round after round.

``engine.serve`` (the code of ``python -m engine serve``) on 127.0.0.1, fed rounds of 21
clients at once, as a machine whose server any program may reach meets them:

- 8 good clients: streamed and whole chat and text completions, sampled and greedy, with
  logprobs;
- 4 that hang up: a stream closed after its first chunk, a whole reply abandoned;
- 3 slow ones: a body sent in pieces with pauses, a stream read a line at a time with pauses;
- 6 hostile ones: a ``text/plain`` body, a foreign ``Host``, a body over the size limit, a
  body that is not JSON, a deeply nested one, half a request line and then silence.

The server runs in a process of its own (the clients' memory is not counted). After each
round (the server idle again and its freed memory given back to the system, as it does
itself once idle; Python's garbage collected) the server process's resident memory (RSS)
and MLX's active memory are read. Goal: from round 2 to the last, each grows by
under 2 % (round 1 fills what stays: compiled kernels, the prefix store, the caches).
"""

from __future__ import annotations

import contextlib
import gc
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import mlx.core as mx
import psutil

from engine.serve.engine_loop import IDLE_WAIT_S
from engine.serve.freed_memory import give_back_freed_memory

GOALS = {"growth_at_most": 0.02}
ROOT = Path(__file__).resolve().parent.parent
CHAT = [{"role": "user", "content": "Tell me about the sea."}]


def _serve(source: str) -> None:
    """The server's own process (``python -m bench.serve_soak SOURCE``): prints its URL, then,
    for each line read, its memory once idle; ends at the end of its input."""
    from engine.serve.engine_loop import EngineLoop
    from engine.serve.server_thread import ServerThread
    from engine.session.session import EngineSession

    def load() -> EngineSession:
        session = EngineSession()
        session.load(source)
        return session

    engine = EngineLoop(load)
    server = ServerThread(engine, "127.0.0.1", 0)
    print(f"http://127.0.0.1:{server.port}", flush=True)
    process = psutil.Process()
    try:
        for _ in sys.stdin:
            # The server gives its freed memory back once idle for IDLE_WAIT_S; the collector
            # runs here so that the figure reads what is held, not garbage not yet collected.
            time.sleep(2 * IDLE_WAIT_S)
            gc.collect()
            give_back_freed_memory()
            memory = {
                "rss": process.memory_info().rss,
                "active": mx.get_active_memory(),
                "cache": mx.get_cache_memory(),
            }
            print(json.dumps(memory), flush=True)
    finally:
        server.stop()
        engine.close()


@contextlib.contextmanager
def _served(source: str) -> Iterator[tuple[str, Callable[[], dict]]]:
    """The server in a process of its own (the clients' memory is not the server's): its URL
    and a function that reads its memory."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.serve_soak", source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        url = child.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the server did not start (exit {child.wait()})")

        def measure() -> dict:
            child.stdin.write("measure\n")
            child.stdin.flush()
            return json.loads(child.stdout.readline())

        yield url, measure
    finally:
        child.stdin.close()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _good(url: str, i: int, tokens: int) -> Callable[[], None]:
    def run() -> None:
        sampled = {"temperature": 0.8, "seed": i} if i % 2 else {"temperature": 0}
        if i % 4 < 2:
            body = {"messages": CHAT, "max_tokens": tokens, "logprobs": True, "top_logprobs": 3, **sampled}
            if i % 4 == 0:
                with httpx.stream(
                    "POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=300
                ) as r:
                    for _ in r.iter_lines():
                        pass
            else:
                httpx.post(url + "/v1/chat/completions", json=body, timeout=300).raise_for_status()
        else:
            body = {"prompt": "The sea is", "max_tokens": tokens, "logprobs": 2, **sampled}
            httpx.post(url + "/v1/completions", json=body, timeout=300).raise_for_status()

    return run


def _hang_up(url: str, i: int, tokens: int) -> Callable[[], None]:
    def run() -> None:
        body = {"messages": CHAT, "max_tokens": tokens * 4, "stream": i % 2 == 0}
        if i % 2 == 0:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        break  # closed after the first chunk
        else:
            with contextlib.suppress(httpx.TimeoutException):
                httpx.post(url + "/v1/chat/completions", json=body, timeout=0.3)  # abandoned

    return run


def _raw(url: str, data: bytes, pause: float = 0.0, pieces: int = 1, read: bool = True) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        step = max(1, len(data) // pieces)
        for start in range(0, len(data), step):
            s.sendall(data[start : start + step])
            time.sleep(pause)
        if not read:
            return b""
        out = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                out += chunk
        return out


def _request(path: str, body: bytes, host: str = "127.0.0.1", kind: str = "application/json") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode() + body


def _slow(url: str, i: int, tokens: int) -> Callable[[], None]:
    def run() -> None:
        body = json.dumps({"messages": CHAT, "max_tokens": tokens}).encode()
        if i == 0:  # the body in pieces, with pauses
            _raw(url, _request("/v1/chat/completions", body), pause=0.1, pieces=8)
        else:  # a stream read a line at a time, with pauses
            stream = {"messages": CHAT, "max_tokens": tokens, "stream": True}
            with httpx.stream("POST", url + "/v1/chat/completions", json=stream, timeout=300) as r:
                for _ in r.iter_lines():
                    time.sleep(0.02)

    return run


def _hostile(url: str, i: int, tokens: int) -> Callable[[], None]:
    good = json.dumps({"messages": CHAT, "max_tokens": tokens}).encode()
    nested = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    cases = [
        lambda: _raw(url, _request("/v1/chat/completions", good, kind="text/plain")),
        lambda: _raw(url, _request("/v1/chat/completions", good, host="evil.example")),
        lambda: _raw(url, _request("/v1/chat/completions", b"x" * (9 * 1024 * 1024))),
        lambda: _raw(url, _request("/v1/chat/completions", b"{not json")),
        lambda: _raw(url, _request("/v1/chat/completions", nested)),
        lambda: _raw(url, b"POST /v1/chat/comp", pause=0.5, read=False),  # half a request line
    ]

    def run() -> None:
        with contextlib.suppress(OSError):  # a server may close on a refused body mid-send
            cases[i % len(cases)]()

    return run


def _round(url: str, tokens: int) -> int:
    """One round of every client at once; returns how many raised (a refusal is an answer)."""
    clients = [
        *(_good(url, i, tokens) for i in range(8)),
        *(_hang_up(url, i, tokens) for i in range(4)),
        *(_slow(url, i, tokens) for i in range(3)),
        *(_hostile(url, i, tokens) for i in range(6)),
    ]
    failures = []

    def guarded(client: Callable[[], None]) -> None:
        try:
            client()
        except Exception as exc:  # noqa: BLE001 - counted: a good client's failure is reported
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    return len(failures)


def _idle(url: str) -> None:
    """Wait until the server answers a small request at once again (the round's work done)."""
    httpx.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 1}, timeout=300).raise_for_status()


def serve_soak(source: str, rounds: int = 5, tokens: int = 24) -> dict:
    """``source``: the model the server loads (a fast one: the load is in the clients)."""
    rss, active, cached, failures = [], [], [], []
    with _served(source) as (url, measure):
        for _ in range(rounds):
            failures.append(_round(url, tokens))
            _idle(url)
            memory = measure()
            rss.append(memory["rss"])
            active.append(memory["active"])
            cached.append(memory["cache"])
    base = min(1, rounds - 1)

    def growth(values: list[int]) -> float:
        return round((values[-1] - values[base]) / values[base], 4) if values[base] else 0.0

    return {
        "rounds": rounds,
        "clients_per_round": 21,
        "rss_mib": [round(v / 2**20, 1) for v in rss],
        "mlx_active_mib": [round(v / 2**20, 1) for v in active],
        "mlx_cache_mib": [round(v / 2**20, 1) for v in cached],
        "rss_growth": growth(rss),
        "mlx_active_growth": growth(active),
        "client_failures": failures,
        "goal": GOALS,
    }


if __name__ == "__main__":
    _serve(sys.argv[1])
