"""Figure 25: Logitscope served over the OpenAI API (``engine.serve``, the code of ``python -m
engine serve``, on 127.0.0.1) against the same request run by the engine in this process, and
against ``mlx_lm.server`` serving the same model. One streamed chat request at a time, greedy,
EOS banned, ``tokens`` tokens; the rate is the client's: tokens 2 to the last over the time
between their chunks. Goals: served / local ≥ 0.95, served / mlx_lm.server ≥ 1.0."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx

from bench.common import median
from engine.api.events import Finished
from engine.api.params import SamplingParams
from engine.session.session import EngineSession

CHAT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]
GOALS = {"served_over_local": 0.95, "served_over_mlx_lm_server": 1.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, limit: float = 180.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {limit} s")


def _streamed_tps(url: str, body: dict) -> float:
    """Tokens per second between a streamed reply's first and last content chunks."""
    times = []
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=600) as answer:
        for line in answer.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


@contextlib.contextmanager
def _ours(source: str) -> Iterator[tuple[str, EngineSession]]:
    import uvicorn

    from engine.serve.engine_loop import EngineLoop
    from engine.serve.http import make_app

    def load() -> EngineSession:
        session = EngineSession()
        session.load(source)
        return session

    engine = EngineLoop(load)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(engine), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}", engine.session
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.close()


@contextlib.contextmanager
def _mlx_lm_server(folder: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm", "server", "--model", folder, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _local_tps(source: str, params: SamplingParams) -> float:
    session = EngineSession()
    session.load(source)
    rid = session.start(CHAT, params).request_id
    done = None
    while session.has_work():
        for event in session.step():
            if isinstance(event, Finished) and event.request_id == rid:
                done = event
    return done.generation_tps if done is not None else 0.0


def serve_cost(source: str = "default", tokens: int = 48, repeats: int = 3, peer: bool = True) -> dict:
    """``source``: the model (``engine.models.load``'s words); ``peer``: measure mlx_lm.server too."""
    from engine.models.load import resolve

    ours_tps, local_tps, peer_tps = [], [], []
    with _ours(source) as (url, session):
        no_eos = {str(t): -100 for t in session.info.eos_token_ids}
        body = {"messages": CHAT, "max_tokens": tokens, "temperature": 0, "logit_bias": no_eos}
        params = SamplingParams(max_tokens=tokens, logit_bias={int(k): v for k, v in no_eos.items()})
        _streamed_tps(url, {**body, "max_tokens": 4})  # the step compiled once
        for _ in range(repeats):
            ours_tps.append(_streamed_tps(url, {**body, "logprobs": True, "top_logprobs": 5}))
    for _ in range(repeats):
        local_tps.append(_local_tps(source, params.with_changes(top_logprobs=5)))
    out = {
        "tokens": tokens,
        "served_tps": round(median(ours_tps), 2),
        "local_tps": round(median(local_tps), 2),
    }
    out["served_over_local"] = round(out["served_tps"] / out["local_tps"], 3)
    if peer:
        folder = str(resolve(source)[1])
        with _mlx_lm_server(folder) as url:
            _streamed_tps(url, {**body, "model": folder, "max_tokens": 4})
            for _ in range(repeats):
                peer_tps.append(_streamed_tps(url, {**body, "model": folder}))
        out["mlx_lm_server_tps"] = round(median(peer_tps), 2)
        out["served_over_mlx_lm_server"] = round(out["served_tps"] / out["mlx_lm_server_tps"], 3)
    out["goal"] = GOALS
    return out
