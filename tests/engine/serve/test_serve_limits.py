"""The server's limits (``engine.serve.limits.ServeLimits``), each hit on purpose over real
HTTP on 127.0.0.1 with the tiny model and answered in OpenAI's error shape: a body too large
by its ``Content-Length`` or as it arrives (413), a body too slow (408), half a request line
(the connection closed), connections past the limit (503), requests past the queue's depth
(429 with ``Retry-After``), a prompt past the context (400, before tokenizing where its
size alone says so); and the prompt templated, tokenized and its grammar compiled on the
server's threads, never the engine's."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from engine.serve.limits import ServeLimits
from tests.engine.serve.serving import CHAT, HANG_GUARD_S, JSON, Served, events_of, is_openai_error, post, until

SHORT = 0.5
"""A limit's timeout in these tests: each test waits for its effect, never for the clock."""


@pytest.fixture(scope="module")
def limited(tiny_folder):
    running = Served(tiny_folder, limits=ServeLimits(max_body_bytes=4_000, max_queued=1))
    yield running
    running.close()


@pytest.fixture(scope="module")
def impatient(tiny_folder):
    """Short header and body timeouts, for the tests that wait for them alone (another test's
    request could meet them on a busy machine)."""
    running = Served(tiny_folder, limits=ServeLimits(header_timeout_s=SHORT, body_timeout_s=SHORT))
    yield running
    running.close()


def _connect(running: Served) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", running.port), timeout=HANG_GUARD_S)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_a_body_past_its_size_is_a_413_by_content_length_and_while_read(limited):
    big = {"messages": [{"role": "user", "content": "x" * 10_000}]}
    declared = post(limited.url + "/chat/completions", big)
    assert declared.status_code == 413 and is_openai_error(declared.json())

    def chunks():  # chunked: no Content-Length says the size first
        for _ in range(10):
            yield b" " * 1_000
        yield b"{}"

    streamed = httpx.post(limited.url + "/chat/completions", content=chunks(), headers=JSON, timeout=HANG_GUARD_S)
    assert "content-length" not in streamed.request.headers
    assert streamed.status_code == 413 and is_openai_error(streamed.json())


def test_a_body_that_does_not_arrive_is_a_408(impatient):
    with _connect(impatient) as sock:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"messages": ')  # and nothing more
        answer = _read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert b'"code":"body_timeout"' in body.replace(b" ", b"")


def test_half_a_request_line_is_closed(impatient):
    with _connect(impatient) as sock:
        sock.sendall(b"POST /v1/chat/compl")  # and nothing more
        assert _read_all(sock) == b""  # closed by the server: the socket is free again
    with _connect(impatient) as sock:  # nothing sent at all
        assert _read_all(sock) == b""


def test_connections_past_the_limit_are_a_503(tiny_folder):
    running = Served(tiny_folder, limits=ServeLimits(max_connections=3))
    held = [_connect(running) for _ in range(3)]
    try:
        answer = httpx.get(running.url + "/models", timeout=HANG_GUARD_S)  # the fourth connection
        assert answer.status_code == 503 and is_openai_error(answer.json())
        assert int(answer.headers["retry-after"]) >= 1
        for sock in held:
            sock.close()
        # The server sees the three close, then answers again.
        until(lambda: httpx.get(running.url + "/models", timeout=HANG_GUARD_S).status_code == 200, "a 200 again")
    finally:
        running.close()


def test_a_request_past_the_queues_depth_is_a_429_with_retry_after(limited):
    body = {"messages": CHAT, "max_tokens": 400, "stream": True, "logit_bias": limited.no_eos()}
    with httpx.stream("POST", limited.url + "/chat/completions", json=body, timeout=HANG_GUARD_S) as first:
        lines = events_of(first.iter_lines())  # kept: a generator dropped closes the stream
        next(lines)  # held: the one place is taken
        limited.pause()
        try:
            second = post(limited.url + "/chat/completions", {"messages": CHAT, "max_tokens": 2})
        finally:
            limited.resume()
    assert second.status_code == 429 and is_openai_error(second.json())
    assert int(second.headers["retry-after"]) >= 1
    # The first one's place is freed once its client's leaving is seen: a 200 again.
    until(
        lambda: post(limited.url + "/chat/completions", {"messages": CHAT, "max_tokens": 2}).status_code == 200,
        "the first request's place freed",
    )


def test_a_prompt_past_the_context_is_a_400_before_it_is_tokenized(served):
    tokenized: list[str] = []
    prompt_for = served.session.prompt_for

    def recording(messages):
        tokenized.append("chat")
        return prompt_for(messages)

    served.session.prompt_for = recording
    try:
        huge = "word " * 200_000  # 1 MB: more tokens than 512 even at the longest token
        answer = post(served.url + "/chat/completions", {"messages": [{"role": "user", "content": huge}]})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "messages"
        assert tokenized == []  # refused from its size alone
        long = " ".join(f"w{i}" for i in range(600))  # ~1,800 tokens, under the size bound
        answer = post(served.url + "/completions", {"prompt": long, "max_tokens": 2})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "prompt"
        assert "context" in answer.json()["error"]["message"]
    finally:
        served.session.prompt_for = prompt_for


def test_templating_tokenizing_and_the_grammar_run_off_the_engines_thread(served):
    threads: dict[str, list[str]] = {"template": [], "compile": []}
    prompt_for = served.session.prompt_for
    vocabulary = served.session.scheduler.vocabulary
    compile_grammar = vocabulary.compile

    def recording_prompt(messages):
        threads["template"].append(threading.current_thread().name)
        return prompt_for(messages)

    def recording_compile(grammar):
        if grammar not in vocabulary._matchers:  # a compile, not a kept matcher
            threads["compile"].append(threading.current_thread().name)
        return compile_grammar(grammar)

    served.session.prompt_for = recording_prompt
    vocabulary.compile = recording_compile
    try:
        body = {"messages": CHAT, "max_tokens": 4, "grammar": 'root ::= "yes" | "no" | "maybe so"'}
        answer = post(served.url + "/chat/completions", body)
        assert answer.status_code == 200, answer.text
    finally:
        served.session.prompt_for = prompt_for
        vocabulary.compile = compile_grammar
    assert threads["template"] and threads["compile"]
    assert "logitscope-serve" not in threads["template"] + threads["compile"]  # the engine's thread


def test_a_stream_goes_on_while_another_requests_prompt_is_templated(served):
    """The event order, not a time: while one request's templating is held (a 50,000-token
    prompt's, standing for any), the engine keeps stepping another request's reply."""
    held, release, left = threading.Event(), threading.Event(), threading.Event()
    steps = [0]
    prompt_for, step = served.session.prompt_for, served.session.step

    def holding_prompt(messages):
        if messages[-1]["content"] == "HOLD":
            held.set()
            release.wait(2 * HANG_GUARD_S)  # past the wait below: the hold ends only by release
            left.set()
        return prompt_for(messages)

    def counting_step():
        steps[0] += 1
        return step()

    served.session.prompt_for, served.session.step = holding_prompt, counting_step
    answers: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: answers.append(
            post(served.url + "/chat/completions", {"messages": [{"role": "user", "content": "HOLD"}], "max_tokens": 2})
        )
    )
    try:
        body = {"messages": CHAT, "max_tokens": 400, "stream": True, "logit_bias": served.no_eos()}
        with httpx.stream("POST", served.url + "/chat/completions", json=body, timeout=HANG_GUARD_S) as first:
            lines = events_of(first.iter_lines())
            next(lines)
            asking.start()
            assert held.wait(HANG_GUARD_S), "hang guard: the held request never reached its template"
            at_hold = steps[0]
            until(lambda: steps[0] >= at_hold + 3, "three engine steps while another request's prompt was held")
            assert not left.is_set()  # the hold stood all along: it ends only by release
            release.set()
        asking.join(HANG_GUARD_S)
        assert answers and answers[0].status_code == 200, answers
    finally:
        release.set()
        served.session.prompt_for, served.session.step = prompt_for, step


def test_n_probs_100_beside_a_row_asking_5_leaves_its_reply_as_it_is_alone(served):
    """Decoded in the same steps as a request asking llama.cpp's ``n_probs`` 100, a request
    asking 5 gets exactly its reply alone: tokens, logprobs and candidates (its pack is its
    own width: ``tests/engine/sampling/test_pack_width.py``)."""
    url = served.url + "/chat/completions"
    five = {"messages": CHAT, "max_tokens": 12, "temperature": 0.8, "seed": 7, "logprobs": True, "top_logprobs": 5}
    wide = {"messages": CHAT, "max_tokens": 12, "temperature": 0.8, "seed": 8, "n_probs": 100}
    alone = post(url, five).json()
    arrived = threading.Event()
    submitted: list[object] = []
    submit = served.engine.submit

    def counting(request, sink):
        submitted.append(request)
        if len(submitted) == 2:
            arrived.set()
        return submit(request, sink)

    answers: dict[str, httpx.Response] = {}
    askers = [
        threading.Thread(target=lambda k=k, b=b: answers.__setitem__(k, post(url, b)))
        for k, b in (("five", five), ("wide", wide))
    ]
    served.engine.submit = counting
    served.engine.peak_batch = 0
    served.pause()  # both reach the engine before either is decoded
    try:
        for asker in askers:
            asker.start()
        assert arrived.wait(HANG_GUARD_S), "hang guard: the two requests never reached the engine"
    finally:
        served.resume()
        served.engine.submit = submit
        for asker in askers:
            asker.join(HANG_GUARD_S)
    assert served.engine.peak_batch >= 2  # decoded side by side
    beside = answers["five"].json()["choices"][0]
    assert beside["message"] == alone["choices"][0]["message"]
    assert beside["logprobs"] == alone["choices"][0]["logprobs"]
    probs = answers["wide"].json()["completion_probabilities"]
    assert len(probs[0]["top_logprobs"]) == 100


def test_the_longest_token_bound_is_read_from_the_vocabulary_and_holds(served):
    """The cheap check before tokenizing needs an upper bound of a token's bytes: read from the
    vocabulary's strings (decoding the default model's 49,152 tokens one by one took 9 s at
    the first request), never under what any token decodes to."""
    vocab = served.session.scheduler.loaded.vocab_size
    longest = max(len(served.session.token_bytes(i)) for i in range(vocab))
    assert served.engine._longest_token() >= longest
