"""A real OpenAI-compatible server started by a test on 127.0.0.1 (``mlx_lm.server``): a
free port, waiting until it answers, stopping it. ``fresh_home``: the server runs as for a
new user (HOME and HF_HOME in an empty folder, so its Hugging Face cache folder does not
exist and its ``/v1/models`` fails: docs/REMOTE.md). ``mlx_lm_distributed_server``: the same
server across several local ranks (``mlx.launch --backend ring``), its process group stopped
and checked gone afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
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


def server_env(workdir: Path, fresh_home: bool) -> dict[str, str]:
    """The server's environment: offline; ``fresh_home``: HOME and HF_HOME in an empty
    folder of ``workdir``, else a Hugging Face cache folder that exists (for /v1/models)."""
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
    return env


@contextlib.contextmanager
def mlx_lm_server(folder: Path, workdir: Path, fresh_home: bool = False) -> Iterator[str]:
    """``mlx_lm.server`` serving the model ``folder`` (its model id is the folder's path) on
    127.0.0.1: its base URL while the block runs; the server is stopped afterwards. Its
    requests are logged, one line each, in ``workdir / "server.log"``."""
    with mlx_lm_server_process(folder, workdir, fresh_home) as (url, _proc):
        yield url


@contextlib.contextmanager
def mlx_lm_server_process(
    folder: Path, workdir: Path, fresh_home: bool = False
) -> Iterator[tuple[str, subprocess.Popen]]:
    """:func:`mlx_lm_server`, with its process too (a test that stops the server mid-reply)."""
    port = free_port()
    log_path = workdir / "server.log"
    env = server_env(workdir, fresh_home)
    model = str(Path(folder).resolve())
    cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", model, "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log_path, path="/health" if fresh_home else "/v1/models")
        yield url, proc
    finally:
        if proc.poll() is None:
            stop(proc)


def posts(workdir: Path) -> int:
    """How many POST requests the server of ``workdir`` has answered so far (its log)."""
    return (workdir / "server.log").read_text(errors="replace").count('"POST /v1/')


def port_is_free(port: int) -> bool:
    """Nothing is bound to ``port`` on 127.0.0.1 (SO_REUSEADDR: a closed connection still
    in TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free ports (the ring backend listens on
    ``--starting-port`` + rank)."""
    for _ in range(50):
        first = free_port()
        if all(port_is_free(first + i) for i in range(1, count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


@dataclass(frozen=True)
class Launched:
    """A distributed server while it runs: its base URL (rank 0's HTTP), the process group
    that holds the launcher and every rank, and every port it listens on."""

    url: str
    pgid: int
    ports: tuple[int, ...]


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def stop_group(proc: subprocess.Popen, wait: float = 10) -> None:
    """SIGTERM to the whole group (mlx.launch and the ranks it spawned), SIGKILL to what is
    left after ``wait`` seconds; returns once no process of the group remains."""
    pgid = proc.pid  # started with start_new_session: the launcher leads its group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
        # The ranks are the launcher's children: once it is gone, init reaps them.
        deadline = time.monotonic() + wait
        while not group_gone(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if group_gone(pgid):
            return
    raise RuntimeError(f"processes of group {pgid} survived SIGKILL")


@contextlib.contextmanager
def mlx_lm_distributed_server(
    folder: Path, workdir: Path, ranks: int = 2, pipeline: bool = False, fresh_home: bool = True
) -> Iterator[Launched]:
    """``mlx_lm.server`` over ``ranks`` local processes (``mlx.launch -n ranks --backend
    ring``, 127.0.0.1 only): tensor parallel, or pipeline parallel with ``pipeline``. Only
    rank 0 answers HTTP. The launcher runs in a session of its own so that its whole process
    group, ranks included, is stopped afterwards; a start that fails says so with the tail
    of the log (every rank's stdout and stderr, in ``workdir / "server.log"``)."""
    port, ring = free_port(), free_port_run(ranks)
    log_path = workdir / "server.log"
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "mlx.launch"), "-n", str(ranks), "--backend", "ring", "--starting-port", str(ring)]
    # "--" ends mlx.launch's options: without it the server's --host would be taken (as an
    # abbreviation) for mlx.launch's own --hosts.
    cmd += ["--", str(bin_dir / "mlx_lm.server"), "--model", str(Path(folder).resolve())]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *(["--pipeline"] if pipeline else [])]
    with open(log_path, "wb") as log:
        # stdin a pipe never written: mlx.launch forwards its stdin to every rank, and a
        # stdin at end of file (/dev/null) would make that loop spin.
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env(workdir, fresh_home),
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        problem = wait_generating(proc, url)
        if problem:
            fail_with_log(proc, f"distributed mlx_lm.server (process group {proc.pid}) {problem}", log_path)
        yield Launched(url, proc.pid, (port, *range(ring, ring + ranks)))
    finally:
        stop_group(proc)
        proc.stdin.close()


def log_tail(log: Path, size: int = 2000) -> str:
    """The exceptions a server's log names, then its end without access lines (a failed
    server keeps answering /health, and the HTTP handler's own traceback comes last: either
    would push the cause out of sight)."""
    lines = log.read_text(errors="replace").splitlines()
    errors = dict.fromkeys(line for line in lines if re.match(r"\w*(Error|Exception): ", line))
    tail = "\n".join(line for line in lines if '" 200 -' not in line and '" 503 -' not in line)[-size:]
    return "\n".join(errors) + "\n----\n" + tail


def fail_with_log(proc: subprocess.Popen, what: str, log: Path, settle: float = 3) -> None:
    """Fails the test with ``what`` and the log's tail, once the error reached the log: the
    launcher forwards what the ranks write a moment later, and loses it when stopped first."""
    deadline = time.monotonic() + settle
    while "Error" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.1)
    stop_group(proc)
    pytest.fail(f"{what}:\n{log_tail(log)}")


def wait_generating(proc: subprocess.Popen, url: str, limit: float = 120) -> str:
    """Waits until the server has generated one token; "" then, else what went wrong. /health
    is not enough: it answers 200 while the ranks still load the model, and 503 for good (the
    processes stay up) once loading failed; a reply proves every rank loaded its shard and
    the collectives work."""
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            return f"exited ({proc.returncode}) before it answered"
        try:
            answer = httpx.post(f"{url}/v1/completions", json={"prompt": "a", "max_tokens": 1}, timeout=limit)
        except httpx.HTTPError:
            answer = None  # not listening yet
        if answer is not None:
            return "" if answer.status_code == 200 else f"answered {answer.status_code} ({answer.text[:200]})"
        if time.monotonic() > deadline:
            return f"not ready in {limit} s"
        time.sleep(0.25)
