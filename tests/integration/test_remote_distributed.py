"""Logitscope's remote path against a real distributed ``mlx_lm.server`` (docs/REMOTE.md, "A
model across several Macs").

The server runs over two local ranks (``mlx.launch -n 2 --backend ring``, 127.0.0.1 only), once
tensor parallel and once pipeline parallel (``--pipeline``), on a tiny random-weight qwen2 (an
architecture mlx-lm can shard both ways) whose heads, KV heads, MLP width and layers all divide
by two. Its greedy replies, read through ``RemoteBackend`` as the app reads them, must equal the
single-process server's on the same model token for token, each logprob within ``TOL``, one
request at a time and two at once (batched). Every
process the launcher started must be gone afterwards, and every port it listened on free.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("httpx")

from tests.support.local_server import (  # noqa: E402
    group_gone,
    mlx_lm_distributed_server,
    mlx_lm_server,
    port_is_free,
)

# float32 weights; tensor parallelism sums partial products across ranks (all_sum), so
# the numbers differ from one process's by rounding only.
TOL = 1e-4
N = 16
CHATS = [
    [{"role": "user", "content": "the theme in the tin"}],
    [{"role": "user", "content": "a cat sat on the mat, then"}],
]


def write_index(folder: Path) -> None:
    """``model.safetensors.index.json``: mlx-lm's pipeline loader reads which layers each file
    holds from it and refuses a folder without one (a single-file model has none)."""
    import mlx.core as mx

    names = mx.load(str(folder / "model.safetensors"))
    weight_map = {name: "model.safetensors" for name in names}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.tiny_archs import write_tiny_arch

    folder = write_tiny_arch(tmp_path_factory.mktemp("dist-model") / "tiny-qwen2", "qwen2")
    config = json.loads((folder / "config.json").read_text())
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "num_hidden_layers"):
        assert config[key] % 2 == 0, key  # sharded across two ranks
    write_index(folder)
    return folder


def run_chats(url: str, model: str, chats: list[list[dict]], max_tokens: int = N):
    """Greedy chat replies through ``RemoteBackend``, all started at once (as the app's
    compare does): each one's (steps, finish), and the seconds they took together."""
    from engine.api.events import Finished, TokenStep
    from engine.api.params import SamplingParams
    from engine.remote.backend import RemoteBackend

    backend = RemoteBackend(url, timeout=300.0)
    try:
        # A fresh home folder: the server cannot list its models, so it is named.
        info = backend.load(model)
        assert info.server == "mlx_lm" and info.stage_detected
        start = time.perf_counter()
        params = SamplingParams(max_tokens=max_tokens, top_logprobs=10)
        rids = [backend.start(chat, params).request_id for chat in chats]
        steps, done = {rid: [] for rid in rids}, {}
        while backend.has_work():
            for event in backend.step():
                if isinstance(event, TokenStep):
                    steps[event.request_id].append(event)
                elif isinstance(event, Finished):
                    done[event.request_id] = event
        took = time.perf_counter() - start
    finally:
        backend.close()
    for rid in rids:
        assert done[rid].finish_reason != "error", done[rid]
    return [(steps[rid], done[rid]) for rid in rids], took


def replies(url: str, model: str) -> tuple[list, float]:
    """Each chat's (steps, finish), one after another and then all at once (the server
    batches them); the seconds per token of the ones one after another."""
    run_chats(url, model, CHATS[:1], max_tokens=2)  # warm: the model loaded, kernels built
    out, seconds = [], 0.0
    for chat in CHATS:
        (reply,), took = run_chats(url, model, [chat])
        out.append(reply)
        seconds += took
    at_once, _ = run_chats(url, model, CHATS)
    return out + at_once, seconds / sum(len(steps) for steps, _ in out)


def largest_difference(want: list, got: list) -> float:
    """Token ids and texts equal, step by step; the largest |Δ logprob| over the chosen tokens
    and every reported alternative."""
    worst = 0.0
    for (w_steps, w_done), (g_steps, g_done) in zip(want, got, strict=True):
        assert [s.token_id for s in g_steps] == [s.token_id for s in w_steps]
        assert g_done.finish_reason == w_done.finish_reason and g_done.text == w_done.text
        for w, g in zip(w_steps, g_steps, strict=True):
            assert g.chain == w.chain == ("raw",)
            worst = max(worst, abs(g.logprob_at("raw") - w.logprob_at("raw")))
            w_top = {c.token_id: c.logprobs[0] for c in w.top}
            assert {c.token_id for c in g.top} == set(w_top)
            worst = max(worst, *(abs(c.logprobs[0] - w_top[c.token_id]) for c in g.top))
    return worst


@pytest.fixture(scope="module")
def single(model_folder: Path, tmp_path_factory: pytest.TempPathFactory):
    """The single-process server's replies and seconds per token."""
    model = str(model_folder.resolve())
    with mlx_lm_server(model_folder, tmp_path_factory.mktemp("single"), fresh_home=True) as url:
        return replies(url, model)


@pytest.mark.parametrize("pipeline", [False, True], ids=["tensor", "pipeline"])
def test_distributed_server_gives_the_single_servers_greedy_tokens_and_logprobs(
    model_folder: Path, single, tmp_path: Path, pipeline: bool
) -> None:
    want, single_s = single
    model = str(model_folder.resolve())
    with mlx_lm_distributed_server(model_folder, tmp_path, ranks=2, pipeline=pipeline) as server:
        got, dist_s = replies(server.url, model)
    assert group_gone(server.pgid), "a process of the launcher's group outlived the test"
    assert all(port_is_free(p) for p in server.ports), server.ports
    assert all(len(steps) >= 4 for steps, _ in want)  # replies long enough to compare
    worst = largest_difference(want, got)
    assert worst < TOL
    print(
        f"{'pipeline' if pipeline else 'tensor'} parallel, 2 ranks: {sum(len(s) for s, _ in got)} tokens equal"
        " (each chat alone, then both at once),"
        f" max |Δ logprob| {worst:.2e}; {dist_s * 1e3:.1f} ms/token vs single {single_s * 1e3:.1f} ms/token"
    )


def test_a_distributed_start_that_fails_says_why_and_leaves_nothing_running(model_folder: Path, tmp_path: Path):
    """mlx_lm.server stays up after its model failed to load (/health answers 503 for good),
    or ends when a rank aborts first; either way the helper stops as soon as a request is
    refused or the launcher exits, with the error from the ranks' log, instead of waiting
    out its limit."""
    broken = tmp_path / "no-index"
    broken.mkdir()
    for f in model_folder.iterdir():
        if f.name != "model.safetensors.index.json":
            (broken / f.name).symlink_to(f)
    with (
        pytest.raises(pytest.fail.Exception, match="model.safetensors.index.json") as failed,
        mlx_lm_distributed_server(broken, tmp_path, ranks=2, pipeline=True),
    ):
        pass
    # The server's own refusal, or its exit when a rank aborts on the missing file first
    # (the launcher then ends: both happen here, by a race between the ranks): not a timeout.
    assert re.search(r"answered 404|exited \(\d+\) before it answered", str(failed.value))
    assert "not ready in" not in str(failed.value)
    pgid = int(re.search(r"process group (\d+)", str(failed.value)).group(1))
    assert group_gone(pgid)
