"""The remote backend against a real ``mlx_lm.server`` started as a new user would start it:
HOME and HF_HOME in an empty folder, so the Hugging Face cache folder does not exist and
the server's ``/v1/models`` fails (its own bug: it scans that folder). Connecting goes on
without the listing when the model is named, and says why there is none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

httpx = pytest.importorskip("httpx")

from tests.support.local_server import mlx_lm_server  # noqa: E402

CHAT = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def fresh_server(tiny_folder, tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("mlx-fresh")
    with mlx_lm_server(Path(tiny_folder), workdir, fresh_home=True) as url:
        assert not (workdir / "home" / ".cache" / "huggingface" / "hub").exists()
        yield url


def run(backend, rid, seconds: float = 120):
    """Step ``backend`` until it has no work: request ``rid``'s steps and its Finished."""
    from engine.api.events import Finished, TokenStep

    steps, done = [], None
    deadline = time.monotonic() + seconds
    while backend.has_work():
        assert time.monotonic() < deadline
        for event in backend.step():
            if isinstance(event, TokenStep) and event.request_id == rid:
                steps.append(event)
            elif isinstance(event, Finished) and event.request_id == rid:
                done = event
    return steps, done


def test_a_fresh_home_server_is_used_without_its_model_list(fresh_server, tiny_folder):
    from engine.api.params import SamplingParams
    from engine.remote.backend import RemoteBackend, RemoteError, probe

    # The server's own bug, as a new user meets it: /v1/models answers with nothing.
    assert httpx.get(fresh_server + "/v1/models", timeout=10).content == b""
    listing = probe(fresh_server)
    assert listing.kind == "mlx_lm" and listing.models == []
    assert "empty body" in listing.problem and "HF_HUB_CACHE" in listing.problem

    # No model named: nothing to go on with, and the error says what to do.
    backend = RemoteBackend(fresh_server)
    with pytest.raises(RemoteError, match="did not list its models.*type the model's name"):
        backend.load("")
    backend.close()

    # A model named: connected, the note says the listing failed and why; replies work.
    backend = RemoteBackend(fresh_server)
    try:
        info = backend.load(str(Path(tiny_folder).resolve()))
        assert info.server == "mlx_lm" and info.stage_detected
        assert "did not list its models" in info.server_note and "HF_HUB_CACHE" in info.server_note
        rid = backend.start(CHAT, SamplingParams(max_tokens=3, top_logprobs=2)).request_id
        steps, done = run(backend, rid)
    finally:
        backend.close()
    assert done.error is None and len(steps) == done.generated_tokens >= 1
