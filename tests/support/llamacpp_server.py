"""llama.cpp's own server, started by a test on 127.0.0.1: the prebuilt ``xllamacpp`` wheel
(current llama.cpp, every sampler) serving the default GGUF in this process, on a free port,
with a small context, one thread and a fixed seed; stopped when the block ends.

llama.cpp names its model by the GGUF's full path (``/v1/models``, ``/props``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.local_server import free_port, port_is_free

CONTEXT = 2048
"""The server's context (one slot): what a window of "all" is sent as."""


@dataclass(frozen=True)
class LlamaServer:
    url: str
    model: str
    """The id ``/v1/models`` lists: the GGUF's full path."""
    context: int


@contextlib.contextmanager
def llamacpp_server(seed: int = 1, limit: float = 60) -> Iterator[LlamaServer]:
    """llama.cpp's server with the default GGUF while the block runs. Skips the test where
    the ``xllamacpp`` wheel is not installed (the ``dev`` extra installs it)."""
    xllamacpp = pytest.importorskip("xllamacpp", reason="llama.cpp's server comes with the xllamacpp wheel (dev extra)")
    from engine.models.load import default_model_path

    params = xllamacpp.CommonParams()
    params.model.path = str(default_model_path())
    params.n_ctx = CONTEXT
    params.n_parallel = 1  # one slot: its context is the whole n_ctx
    # One thread: llama.cpp's threads spin-wait for each other at every op, so on a loaded
    # machine two threads took 108 s for this module's tests where one takes 11 s.
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.verbosity = 1  # errors and warnings: not a line per request in the test's output
    params.sampling.seed = seed
    params.hostnames = ["127.0.0.1"]
    params.port = port = free_port()
    server = xllamacpp.Server(params)  # returns once the model is loaded and it listens
    url = f"http://127.0.0.1:{port}"
    try:
        models = _wait_listed(url, limit)
        yield LlamaServer(url, models[0], CONTEXT)
    finally:
        del server  # its destructor stops the HTTP loop and frees the model
    assert port_is_free(port), f"llama.cpp's server still listens on {port} after it was stopped"


def _wait_listed(url: str, limit: float) -> list[str]:
    deadline = time.monotonic() + limit
    while True:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            answer = httpx.get(url + "/v1/models", timeout=2)
            if answer.status_code == 200 and answer.json().get("data"):
                return [m["id"] for m in answer.json()["data"]]
        if time.monotonic() > deadline:
            pytest.fail(f"llama.cpp's server at {url} listed no model in {limit} s")
        time.sleep(0.1)
