"""``engine.serve`` against real clients, on the tiny model: the ``openai`` SDK (chat and
completions, streamed and not, logprobs), plain HTTP with llama.cpp's bodies, and Logitscope's
own remote backend; each reply is the one the engine writes for the same request here. Bad
bodies get 400s and the server goes on; a client that goes away cancels its request; eight
clients at once are decoded in one batch."""

from __future__ import annotations

import json
import math
import threading
import time

import httpx
import openai
import pytest

from engine.api.events import Finished, TokenStep
from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams
from tests.engine.serve.serving import CHAT, HANG_GUARD_S, JSON, KEY, Served, free_port, local, until


def test_chat_through_the_openai_sdk_is_the_engines_own_reply(served, client, tiny_folder):
    params = SamplingParams(max_tokens=16, temperature=0.8, seed=3, top_logprobs=3)
    steps = local(tiny_folder, params)
    kw = {"model": "tiny", "messages": CHAT, "max_tokens": 16, "temperature": 0.8, "seed": 3}
    whole = client.chat.completions.create(**kw, logprobs=True, top_logprobs=3)
    choice = whole.choices[0]
    assert choice.message.content == "".join(s.text for s in steps)
    got = choice.logprobs.content
    assert [e.token for e in got] == [s.piece for s in steps]
    assert [e.logprob for e in got] == [s.logprob_at("raw") for s in steps]  # the model's own, exactly
    assert [len(e.top_logprobs) for e in got] == [3] * len(steps)
    assert whole.usage.completion_tokens >= len(steps)
    stream = client.chat.completions.create(**kw, logprobs=True, top_logprobs=3, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == choice.message.content
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.logprob for e in entries] == [e.logprob for e in got]
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_completions_through_the_sdk_and_the_final_distribution(served, client, tiny_folder):
    params = SamplingParams(max_tokens=10, temperature=0.7, top_k=20, seed=1, top_logprobs=2)
    steps = local(tiny_folder, params, prompt="Once upon a time")
    kw = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0.7, "seed": 1, "logprobs": 2}
    answer = client.completions.create(**kw, extra_body={"top_k": 20})
    choice = answer.choices[0]
    assert choice.text == "".join(s.text for s in steps)
    assert choice.logprobs.token_logprobs == [s.logprob_at("raw") for s in steps]
    # llama.cpp's post_sampling_probs: the distribution after the chain, the one drawn from.
    final = client.completions.create(**kw, extra_body={"top_k": 20, "post_sampling_probs": True})
    assert final.choices[0].logprobs.token_logprobs == [s.logprob for s in steps]


def test_a_llama_cpp_body_over_plain_http(served, tiny_folder):
    params = SamplingParams(
        max_tokens=12,
        temperature=0.9,
        top_k=30,
        min_p=0.02,
        repetition_penalty=1.1,
        penalty_window=32,
        dry_multiplier=0.8,
        xtc_probability=0.5,
        xtc_threshold=0.2,
        seed=4,
        top_logprobs=5,
        samplers=LLAMA_CPP_SAMPLERS,
    )
    steps = local(tiny_folder, params)
    body = {
        "messages": CHAT,
        "n_predict": 12,
        "temperature": 0.9,
        "top_k": 30,
        "min_p": 0.02,
        "repeat_penalty": 1.1,
        "repeat_last_n": 32,
        "dry_multiplier": 0.8,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.2,
        "seed": 4,
        "n_probs": 5,
        "post_sampling_probs": True,
        "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
        "cache_prompt": True,  # llama.cpp's own field: left alone
    }
    answer = httpx.post(served.url + "/chat/completions", json=body, timeout=120).json()
    probs = answer["completion_probabilities"]
    assert [p["id"] for p in probs] == [s.token_id for s in steps]
    assert [p["prob"] for p in probs] == pytest.approx([math.exp(s.logprob) for s in steps], abs=1e-12)
    assert all(len(p["top_probs"]) <= 5 for p in probs)


def test_logitscopes_remote_backend_reproduces_the_local_reply(served, tiny_folder):
    """The loop closes: the app's remote backend pointed at the app's own server."""
    from engine.remote.backend import RemoteBackend

    params = SamplingParams(max_tokens=12, top_logprobs=3)  # greedy
    steps = local(tiny_folder, params)
    backend = RemoteBackend(served.url.removesuffix("/v1"), timeout=120)
    try:
        backend.load("")
        rid = backend.start(CHAT, params).request_id
        got, done = [], None
        while backend.has_work():
            for e in backend.step():
                if isinstance(e, TokenStep) and e.request_id == rid:
                    got.append(e)
                elif isinstance(e, Finished):
                    done = e
    finally:
        backend.close()
    assert done is not None and done.error is None
    assert [s.token_id for s in got] == [s.token_id for s in steps]
    assert [s.logprob_at(s.reported_stage) for s in got] == [s.logprob_at("raw") for s in steps]


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b"{not json", None),
        (json.dumps({"messages": CHAT, "temperature": "warm"}).encode(), "temperature"),
        (json.dumps({"messages": CHAT, "samplers": ["top_k", "magic"]}).encode(), "samplers"),
        (json.dumps({"messages": CHAT, "max_tokens": 10**9}).encode(), "max_tokens"),
        (json.dumps({"messages": CHAT, "logit_bias": {"999999": 5}}).encode(), "logit_bias"),
        (json.dumps({"messages": "hello"}).encode(), "messages"),
    ],
)
def test_a_bad_body_is_a_400_naming_its_field_and_the_server_goes_on(served, content, param):
    answer = httpx.post(served.url + "/chat/completions", content=content, headers=JSON, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]
    ok = httpx.post(served.url + "/chat/completions", json={"messages": CHAT, "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["role"] == "assistant"


def test_a_client_that_goes_away_cancels_its_request(served):
    no_eos = {str(t): -100 for t in served.session.info.eos_token_ids}
    body = {"messages": CHAT, "max_tokens": 400, "stream": True, "logit_bias": no_eos}
    cancelled = served.engine.cancelled
    with httpx.stream("POST", served.url + "/chat/completions", json=body, timeout=60) as answer:
        lines = answer.iter_lines()
        for _ in range(6):
            next(lines)
    deadline = time.monotonic() + 20
    while served.engine.busy():
        assert time.monotonic() < deadline, "the request went on after its client left"
        time.sleep(0.05)
    assert served.engine.cancelled == cancelled + 1  # ended by the cancel, not by its 400 tokens


def test_eight_clients_at_once_are_decoded_in_one_batch(served):
    """Deterministic, whatever the machine's speed: the engine's thread is held while the
    eight requests arrive, let go once the server has handed all eight to it, and the replies
    cannot end early (their end is banned): every one of them is a row of the same steps."""
    results: list[str] = []
    submitted: list[int] = []
    submit = served.engine.submit

    def counted(request, sink):
        submitted.append(1)
        return submit(request, sink)

    def ask(i: int) -> None:
        client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=HANG_GUARD_S)
        stream = client.chat.completions.create(
            model="tiny",
            messages=CHAT,
            max_tokens=24,
            temperature=1.0,
            seed=i,
            stream=True,
            logit_bias=served.no_eos(),
        )
        results.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))

    # Rows decoded together in one step: tokens after each reply's first (a step that ends one
    # reply can also sample another's first token, one row more than the batch holds).
    decoded: list[int] = []
    step = served.session.step

    def counting():
        events = step()
        decoded.append(len({e.request_id for e in events if isinstance(e, TokenStep) and e.index > 0}))
        return events

    served.session.step = counting
    served.engine.submit = counted
    served.pause()
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        until(lambda: len(submitted) == 8, "eight requests handed to the engine")
    finally:
        served.resume()
        served.engine.submit = submit
    for t in threads:
        t.join(timeout=HANG_GUARD_S)
    served.session.step = step
    assert len(results) == 8 and all(results)
    assert max(decoded) == 8


def test_an_api_key_is_asked_when_one_is_set(tiny_folder):
    running = Served(tiny_folder, api_key=KEY)
    try:
        assert httpx.get(running.url + "/models", timeout=30).status_code == 401
        answer = httpx.get(running.url + "/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["data"][0]["owned_by"] == "logitscope"
    finally:
        running.close()


def test_the_command_line_server(tiny_folder):
    import os
    import subprocess
    import sys

    refused = subprocess.run(
        [sys.executable, "-m", "engine", "serve", "--model", str(tiny_folder), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "--api-key-env" in refused.stderr and "Traceback" not in refused.stderr
    limited = subprocess.run(
        [sys.executable, "-m", "engine", "serve", "--model", str(tiny_folder), "--max-queued", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert limited.returncode == 2 and "--max-queued must be" in limited.stderr
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "serve", "--model", str(tiny_folder), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.2)
        answer = httpx.post(url + "/chat/completions", json={"messages": CHAT, "max_tokens": 3}, timeout=60)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] >= 1
        guarded = httpx.post(
            url + "/chat/completions", json={"messages": CHAT}, headers={"Host": "evil.example"}, timeout=60
        )
        assert guarded.status_code == 421  # the command's server is guarded as the app's is
        # A port in use is a usage error, said before the model would load.
        taken = subprocess.run(
            [sys.executable, "-m", "engine", "serve", "--model", str(tiny_folder), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
        assert "Traceback" not in taken.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
