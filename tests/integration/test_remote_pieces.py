"""A reply from the real ``mlx_lm.server`` (default model) asked for in pieces
(``engine.remote.pieces``): it streams, a reply longer than the timeout still arrives (the
timeout bounds one piece), and a server stopped mid-reply leaves every token received."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

httpx = pytest.importorskip("httpx")

from tests.support.local_server import mlx_lm_server_process, posts, stop  # noqa: E402

CHAT = [{"role": "user", "content": "Write a long story about a dragon who learns to paint."}]


@pytest.fixture()
def server(tmp_path: Path):
    from engine.models.load import resolve

    with mlx_lm_server_process(Path(resolve("default")[1]), tmp_path) as (url, proc):
        yield url, proc, tmp_path


def _backend(url: str, timeout: float):
    from engine.remote.backend import RemoteBackend

    backend = RemoteBackend(url, timeout=timeout)
    backend.load("")
    return backend


def _run(backend, params, on_step=None):
    """(steps, finished, seconds to the first token, seconds to the end)."""
    from engine.api.events import Finished, TokenStep

    rid = backend.start(CHAT, params).request_id
    steps, done, t0, first = [], None, time.monotonic(), None
    while backend.has_work():
        assert time.monotonic() - t0 < 600
        for e in backend.step():
            if isinstance(e, TokenStep) and e.request_id == rid:
                first = first if first is not None else time.monotonic() - t0
                steps.append(e)
                if on_step is not None:
                    on_step(steps)
            elif isinstance(e, Finished) and e.request_id == rid:
                done = e
    return steps, done, first, time.monotonic() - t0


def test_a_reply_longer_than_the_timeout_streams_in_pieces_equal_to_one_request(server):
    """Before: one whole request, "sent nothing for 10 s" and 0 tokens; now each piece fits."""
    from engine.api.params import SamplingParams

    url, _proc, workdir = server
    backend = _backend(url, timeout=10)
    params = SamplingParams(max_tokens=120, top_logprobs=2)
    try:
        before = posts(workdir)
        steps, done, first, total = _run(backend, params)
    finally:
        backend.close()
    assert done.error is None and done.finish_reason == "length" and len(steps) == 120
    assert posts(workdir) - before == 1 + (120 - 8 + 31) // 32  # a first piece of 8, then of 32
    assert first < total / 3  # it streamed: the first token long before the end
    assert done.prompt_tokens > 0 and done.text == "".join(s.text for s in steps)
    # The same reply asked for whole, as mlx_lm.server's own answer: token for token.
    assert [s.token_id for s in steps] == _whole_ids(url, backend, params)


def _whole_ids(url: str, backend, params) -> list[int]:
    """The server's own greedy reply to one whole request: each step's most likely token."""
    from engine.remote.servers import KINDS, build_request

    _, body = build_request(KINDS["mlx_lm"], params, CHAT, "", 0, backend.models[0], True, "auto", None)
    whole = httpx.post(url + "/v1/chat/completions", json=body, timeout=600).json()["choices"][0]
    return [max(e["top_logprobs"], key=lambda a: a["logprob"])["id"] for e in whole["logprobs"]["content"]]


def test_a_reply_whose_tokens_its_text_does_not_spell_is_still_the_servers_own(tiny_folder, tmp_path):
    """The random tiny model's tokens are almost never its tokenizer's split of their text:
    continued from the text, the reply differed from token 8 (the first piece's end). Each
    piece now continues from where the text spells the tokens and drops what it repeats."""
    from engine.api.params import SamplingParams

    with mlx_lm_server_process(tiny_folder, tmp_path) as (url, _proc):
        backend = _backend(url, timeout=60)
        params = SamplingParams(max_tokens=100, top_logprobs=1)
        try:
            steps, done, _, _ = _run(backend, params)
            want = _whole_ids(url, backend, params)
        finally:
            backend.close()
    assert done.error is None and [s.token_id for s in steps] == want


def test_a_server_stopped_mid_reply_keeps_every_token_received(server):
    from engine.api.params import SamplingParams

    url, proc, _ = server
    backend = _backend(url, timeout=30)

    def stop_after_some(steps):
        if len(steps) >= 20 and proc.poll() is None:
            stop(proc)

    try:
        steps, done, _, _ = _run(backend, SamplingParams(max_tokens=300, top_logprobs=2), stop_after_some)
    finally:
        backend.close()
    assert 20 <= len(steps) < 300
    assert done.finish_reason == "error" and done.generated_tokens == len(steps)
    assert done.text == "".join(s.text for s in steps)
    assert f"The reply was cut after {len(steps)} tokens: all {len(steps)} are kept." in done.error


_LLAMA_SCRIPT = """
import sys, time
from tests.support.llamacpp_server import llamacpp_server
with llamacpp_server() as server:
    print(server.url, flush=True)
    time.sleep(3600)
"""


def test_a_llamacpp_server_stopped_mid_reply_keeps_every_token_received(tmp_path):
    """The streaming kinds: llama.cpp's own server (xllamacpp, run in a process of its own
    so that it can be stopped mid-reply) keeps every streamed token, the error saying so."""
    import subprocess
    import sys

    pytest.importorskip("xllamacpp", reason="llama.cpp's server comes with the xllamacpp wheel (dev extra)")
    from engine.api.params import SamplingParams
    from tests.support.paths import ROOT

    proc = subprocess.Popen([sys.executable, "-c", _LLAMA_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), "llama.cpp's server did not start"
        backend = _backend(url, timeout=30)

        def stop_after_some(steps):
            if len(steps) >= 10 and proc.poll() is None:
                proc.kill()

        try:
            steps, done, _, _ = _run(backend, SamplingParams(max_tokens=1000, top_logprobs=2), stop_after_some)
        finally:
            backend.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert 10 <= len(steps) < 1000
    assert done.finish_reason == "error" and done.generated_tokens == len(steps)
    assert done.text == "".join(s.text for s in steps)
    assert f"The reply was cut after {len(steps)} tokens: all {len(steps)} are kept." in done.error
