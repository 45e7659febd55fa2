"""A server's reasoning as token phases (issue 26).

- A stand-in server (real HTTP on 127.0.0.1) streams as vLLM does with a reasoning
  parser: one token a chunk, the thinking as ``reasoning_content`` deltas, the end marker's
  chunk with an empty delta (the parser drops it), then ``content`` deltas.
- A real ``mlx_lm.server`` serves the tiny Qwen3-style model: its one non-streamed answer
  has ``message.reasoning`` and ``message.content`` and every token's logprobs; a greedy
  reply's phases must equal the local engine's for the same tokens.
- The settings per phase are refused for a server, saying why; ``enable_thinking`` goes out
  as ``chat_template_kwargs``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.api.errors import EngineError
from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.api.reasoning import ANSWER, THINKING
from engine.remote.backend import RemoteBackend
from engine.runtime.reasoning_phase import split_reply


def drive(backend, limit: float = 60.0) -> list:
    events, deadline = [], time.monotonic() + limit
    while backend.has_work():
        assert time.monotonic() < deadline, "the backend did not finish in time"
        events += backend.step()
    return events


def test_streamed_reasoning_content_is_thinking_and_content_the_answer(vllm_like):
    backend = RemoteBackend(f"http://127.0.0.1:{vllm_like.server_address[1]}")
    try:
        backend.load("qwen3")
        backend.start([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.7, seed=1, max_tokens=20))
        steps = [e for e in drive(backend) if isinstance(e, TokenStep)]
    finally:
        backend.close()
    assert [s.token_id for s in steps] == [100, 101, 102, 103, 104]
    assert [s.phase for s in steps] == [THINKING] * 3 + [ANSWER] * 2  # the end marker is thinking
    assert [s.text for s in steps] == ["Let", " me", "", "Hi", "!"]
    parts = split_reply(None, [s.token_id for s in steps], [s.text for s in steps], [s.phase for s in steps])
    assert (parts.thinking, parts.answer) == ("Let me", "Hi!")


def test_settings_per_phase_are_refused_with_the_reason_and_the_switch_is_sent(vllm_like):
    backend = RemoteBackend(f"http://127.0.0.1:{vllm_like.server_address[1]}")
    try:
        backend.load("qwen3")
        chat = [{"role": "user", "content": "hi"}]
        with pytest.raises(EngineError, match="one setting.*local model"):
            backend.start(chat, SamplingParams(think_variant=SamplingParams(temperature=0.2)))
        with pytest.raises(EngineError, match="end-of-thinking marker cannot be forced"):
            backend.start(chat, SamplingParams(thinking_budget=10))
        assert not backend.has_work()
        before = len(vllm_like.bodies)
        backend.set_enable_thinking(False)
        backend.start(chat, SamplingParams(max_tokens=20))
        drive(backend)
    finally:
        backend.close()
    (body,) = vllm_like.bodies[before:]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    from engine.remote.servers import refused_by

    fields = [e.field for e in refused_by("vllm", SamplingParams(thinking_budget=3, think_variant=SamplingParams()))]
    assert fields == ["think_variant", "thinking_budget"]  # the app's check before a send


def test_mlx_lm_servers_reasoning_gives_the_local_engines_phases(tmp_path):
    """mlx_lm.server (0.32) starts the reply in its reasoning state when the prompt's last
    ``<think>`` is open (here typed in the user's message), and answers after ``</think>``;
    a bias on ``</think>`` makes the greedy tiny model close it after a few tokens."""
    from engine.api.reasoning import detect_markers
    from engine.models.load import load
    from engine.runtime.prompts import encode_chat
    from engine.runtime.scheduler import Scheduler
    from tests.support.local_server import mlx_lm_server
    from tests.support.tiny_reasoning import write_qwen3_style

    folder: Path = write_qwen3_style(tmp_path / "tiny-qwen3")
    loaded = load(str(folder))
    end = detect_markers(loaded.tokenizer).end[0]
    chat = [{"role": "user", "content": "the cat <think>"}]
    prompt = encode_chat(loaded.tokenizer, chat)
    local = None
    for bias in (1.0, 1.5, 2.0, 0.5, 2.5):  # the first that closes the thinking after a token or more
        params = SamplingParams(max_tokens=10, logit_bias={end: bias}, top_logprobs=3)
        scheduler = Scheduler(loaded)
        rid = scheduler.insert(prompt, params)
        steps = []
        while scheduler.has_work():
            steps += [e for e in scheduler.step() if isinstance(e, TokenStep) and e.request_id == rid]
        phases = [s.phase for s in steps]
        if THINKING in phases and ANSWER in phases and steps[0].token_id != end:
            local = steps
            break
    assert local is not None, "no bias closed the tiny model's thinking"
    with mlx_lm_server(folder, tmp_path) as url:
        backend = RemoteBackend(url)
        try:
            backend.load(str(folder.resolve()))
            backend.start(chat, params)
            remote = [e for e in drive(backend, 120) if isinstance(e, TokenStep)]
        finally:
            backend.close()
    assert [s.token_id for s in remote] == [s.token_id for s in local]
    assert [s.phase for s in remote] == [s.phase for s in local]


def test_a_chunk_with_reasoning_and_content_keeps_the_answers_text_when_the_tokens_have_no_text():
    """A chunk carrying both texts whose tokens came as ids only (vLLM's
    ``return_tokens_as_token_ids``): the answer's text is not dropped with the thinking."""
    from engine.remote.events import RemoteRequest
    from engine.remote.reasoning import phased_tokens
    from engine.remote.wire import TextDecoder, WireChunk, WireEntry

    entries = [WireEntry(i, b"", -0.1, ()) for i in (11, 12, 13)]
    req = RemoteRequest(1, (), SamplingParams(), "", 0, decoder=TextDecoder())
    tokens = phased_tokens(WireChunk(entries, text="Hi!", reasoning="Let me"), req)
    assert [phase for _, phase in tokens] == [THINKING, THINKING, ANSWER]
    assert "".join(t.text for t, phase in tokens if phase == ANSWER) == "Hi!"
    assert "".join(t.text for t, phase in tokens if phase == THINKING) == "Let me"
    assert req.phase == ANSWER
