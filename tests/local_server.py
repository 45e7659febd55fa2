"""A real OpenAI-compatible server started by a test on 127.0.0.1 (``mlx_lm.server``): a
free port, waiting until it lists its models, stopping it."""

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


def wait_ready(proc, url: str, log: Path, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            pytest.fail(f"server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/v1/models", timeout=2).json().get("data"):
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
def mlx_lm_server(folder: Path, workdir: Path) -> Iterator[str]:
    """``mlx_lm.server`` serving the model ``folder`` (its model id is the folder's path) on
    127.0.0.1: its base URL while the block runs; the server is stopped afterwards."""
    port = free_port()
    hub = workdir / "hf-hub"  # /v1/models scans it; it must exist
    hub.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "server.log"
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    model = str(Path(folder).resolve())
    cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log_path)
        yield url
    finally:
        stop(proc)
