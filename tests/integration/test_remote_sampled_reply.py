"""A sampled reply from a real ``mlx_lm.server`` (the default model, started on a fresh home
folder) is one request: its chosen tokens are read from the reply's text among its top lists
(``engine.remote.chosen``), so it never depends on two runs agreeing, with the server's
prompt cache cold (a fresh server) or warm (the same prompt sent twice first)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

httpx = pytest.importorskip("httpx")

from tests.integration.test_remote_fresh_home import run  # noqa: E402
from tests.support.local_server import mlx_lm_server, posts  # noqa: E402

CHAT = [{"role": "user", "content": "Write a short poem about the sea."}]


@pytest.fixture
def fresh(tmp_path):
    """A fresh default-model server: its prompt cache is cold."""
    from engine.models.load import resolve

    folder = Path(resolve("default")[1]).resolve()
    with mlx_lm_server(folder, tmp_path, fresh_home=True) as url:
        yield url, tmp_path, str(folder)


def reply(url: str, model: str, params):
    from engine.remote.backend import RemoteBackend

    backend = RemoteBackend(url, timeout=300)
    try:
        backend.load(model)
        steps, done = run(backend, backend.start(CHAT, params).request_id, seconds=300)
    finally:
        backend.close()
    return steps, done


def drawn(url: str, model: str, params) -> tuple[list[int], list[float], str]:
    """The tokens the server draws for ``params``, asked for as mlx_lm.server reports them
    (``top_logprobs`` absent: the chosen ids and logprobs). On this machine a seeded draw
    repeats, so it checks the tokens read from the one request."""
    from engine.remote.servers import KINDS, build_request

    path, body = build_request(KINDS["mlx_lm"], params, CHAT, "", 0, model, True, "auto", None)
    body.pop("top_logprobs")
    answer = httpx.post(url + path, json=body, timeout=300).json()["choices"][0]
    content = answer["logprobs"]["content"]
    return [e["id"] for e in content], [e["logprob"] for e in content], answer["message"]["content"]


def check_sampled_reply(url: str, workdir: Path, model: str, seed: int, temperature: float = 0.7) -> int:
    """One sampled reply: one request, no error, every token read from it the server's
    own choice; how many were read."""
    from engine.api.params import SamplingParams

    params = SamplingParams(temperature=temperature, seed=seed, max_tokens=24, top_logprobs=5)
    before = posts(workdir)
    steps, done = reply(url, model, params)
    assert done.error is None, done.error
    assert posts(workdir) == before + 1  # one request: nothing to agree with
    ids, logprobs, text = drawn(url, model, params)
    assert done.text == text and len(steps) == len(ids) == done.generated_tokens
    read = [(s, i, lp) for s, i, lp in zip(steps, ids, logprobs, strict=True) if s.token_id is not None]
    for step, token_id, logprob in read:  # what is reported is the server's own choice
        assert step.token_id == token_id and math.isclose(step.logprobs[0], logprob, abs_tol=1e-5)
        assert any(c.token_id == token_id for c in step.top)
    for step in steps:
        assert len(step.top) <= params.top_logprobs + 1
        if step.token_id is None:
            assert step.logprobs == (None,)  # not reported, never a guess
    print(f"sampled reply, T {temperature}, seed {seed}: {len(read)} of {len(steps)} chosen tokens read from the text")
    return len(read)


def test_a_sampled_reply_on_a_cold_server_is_one_request(fresh):
    """A sampled reply read from a cold server is one request.

    Slow: a fresh ``mlx_lm.server`` on the default model (its start and its cold prompt
    cache are the subject)."""
    url, workdir, model = fresh
    assert check_sampled_reply(url, workdir, model, seed=11) >= 12  # most, at T 0.7


def test_a_sampled_reply_after_the_same_prompt_twice_is_one_request(fresh):
    from engine.api.params import SamplingParams

    url, workdir, model = fresh
    for _ in range(2):  # the prompt cache now holds this prompt and a reply to it
        steps, done = reply(url, model, SamplingParams(max_tokens=8, top_logprobs=5))
        assert done.error is None and done.prefilled_tokens is not None
    assert done.prefilled_tokens < done.prompt_tokens  # the second one hit the cache
    assert check_sampled_reply(url, workdir, model, seed=12) >= 12
    # At T 1 this model often draws outside the top 10: fewer are read, none wrongly.
    for seed in (13, 14, 15):
        check_sampled_reply(url, workdir, model, seed=seed, temperature=1.0)
