"""A real OpenAI-compatible server started by a test on 127.0.0.1 (``mlx_lm.server``): a
free port, waiting until it lists its models, stopping it."""

from __future__ import annotations

import socket
import subprocess
import time
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
