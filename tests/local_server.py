"""A real OpenAI-compatible server started by a test on 127.0.0.1 (``mlx_lm.server``): a
free port, waiting until it answers, stopping it. ``fresh_home``: the server runs as for a
new user (HOME and HF_HOME in an empty folder, so its Hugging Face cache folder does not
exist and its ``/v1/models`` fails: docs/REMOTE.md)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, url: str, log: Path, limit: float = 120, path: str = "/v1/models") -> None:
    """Until ``url + path`` answers (``/v1/models``: with a model listed)."""
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            pytest.fail(f"server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            answer = httpx.get(url + path, timeout=2)
            if answer.status_code == 200 and (path != "/v1/models" or answer.json().get("data")):
                return
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"server not ready in {limit} s: {log.read_text()[-2000:]}")
        time.sleep(0.25)


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def mlx_lm_server(folder: Path, workdir: Path, fresh_home: bool = False) -> Iterator[str]:
    """``mlx_lm.server`` serving the model ``folder`` (its model id is the folder's path) on
    127.0.0.1: its base URL while the block runs; the server is stopped afterwards. Its
    requests are logged, one line each, in ``workdir / "server.log"``."""
    port = free_port()
    log_path = workdir / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if fresh_home:
        home = workdir / "home"
        home.mkdir(parents=True, exist_ok=True)
        for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
            env.pop(name, None)
        env.update(HOME=str(home), HF_HOME=str(home / ".cache" / "huggingface"))
    else:
        hub = workdir / "hf-hub"  # /v1/models scans it; it must exist
        hub.mkdir(parents=True, exist_ok=True)
        env["HF_HUB_CACHE"] = str(hub)
    model = str(Path(folder).resolve())
    cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log_path, path="/health" if fresh_home else "/v1/models")
        yield url
    finally:
        stop(proc)


def posts(workdir: Path) -> int:
    """How many POST requests the server of ``workdir`` has answered so far (its log)."""
    return (workdir / "server.log").read_text(errors="replace").count('"POST /v1/')
