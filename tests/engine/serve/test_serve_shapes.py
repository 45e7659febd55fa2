"""The server's answers in OpenAI's shapes where a request goes wrong (real HTTP on 127.0.0.1,
the tiny model): 404, 405, 500 and unparseable bodies (a deeply nested one too) as
``{"error": {...}}``; ``"n": null`` taken; a reply that fails or is cancelled, or whose
server stops, ends its stream with an error event and no closing chunk (no ``finish_reason``,
no ``[DONE]``): a client can tell it from a finish."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from tests.engine.serve.serving import CHAT, HANG_GUARD_S, JSON, Served, events_of, is_openai_error, post, until


@pytest.mark.parametrize(
    ("method", "path", "content", "status"),
    [
        ("GET", "/nothing", None, 404),
        ("GET", "/chat/completions", None, 405),
        ("POST", "/chat/completions", b"[" * 100_000 + b"]" * 100_000, 400),  # json.loads: RecursionError
        ("POST", "/completions", b"\xff\xfe{", 400),  # not UTF-8
    ],
    ids=["404", "405", "nested", "undecodable"],
)
def test_an_error_is_in_openais_error_shape_and_the_server_goes_on(served, method, path, content, status):
    answer = httpx.request(method, served.url + path, content=content, headers=JSON, timeout=HANG_GUARD_S)
    assert answer.status_code == status and is_openai_error(answer.json())
    assert post(served.url + "/chat/completions", {"messages": CHAT, "max_tokens": 2}).status_code == 200


def test_a_500_is_in_openais_error_shape(tiny_folder):
    running = Served(tiny_folder)

    def fail(request):
        raise RuntimeError("a fault inside the server")

    running.engine.prepare = fail  # read per request by the application
    try:
        answer = post(running.url + "/chat/completions", {"messages": CHAT, "max_tokens": 2})
        assert answer.status_code == 500 and is_openai_error(answer.json())
        assert "a fault inside the server" in answer.json()["error"]["message"]
    finally:
        running.close()


def test_n_null_is_taken(served, client):
    answer = post(served.url + "/chat/completions", {"messages": CHAT, "max_tokens": 2, "n": None})
    assert answer.status_code == 200, answer.text
    refused = post(served.url + "/chat/completions", {"messages": CHAT, "max_tokens": 2, "n": 2})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "n"


def _stream_until(url: str, body: dict, act, chunks_before: int = 3) -> list:
    """A stream's events, read while ``act()`` runs after its first ``chunks_before`` ones."""
    events: list = []
    with httpx.stream("POST", url, json=body, timeout=HANG_GUARD_S) as answer:
        assert answer.status_code == 200
        lines = events_of(answer.iter_lines())
        for event in lines:
            events.append(event)
            if len(events) == chunks_before:
                act(events)
        return events


def _ended_with_an_error(events: list, code: str) -> None:
    assert events[-1] != "[DONE]" and "[DONE]" not in events
    assert is_openai_error(events[-1]) and events[-1]["error"]["code"] == code
    finishes = [c["choices"][0]["finish_reason"] for c in events[:-1] if c.get("choices")]
    assert finishes and all(f is None for f in finishes)  # no closing chunk: no finish_reason at all


def test_a_failed_stream_ends_with_its_error_not_a_closing_chunk(tiny_folder):
    running = Served(tiny_folder)
    broken = threading.Event()
    step = running.session.step

    def failing_step():
        if broken.is_set():
            raise RuntimeError("the device went away")
        return step()

    running.session.step = failing_step  # the engine's thread reads it at every step
    try:
        body = {"messages": CHAT, "max_tokens": 400, "stream": True, "logit_bias": running.no_eos()}
        events = _stream_until(running.url + "/chat/completions", body, lambda _: broken.set())
        _ended_with_an_error(events, "engine_error")
        assert "the device went away" in events[-1]["error"]["message"]
        # The openai SDK raises on it, as on OpenAI's own errors mid-stream.
        broken.clear()
        client = openai.OpenAI(base_url=running.url, api_key="unused", max_retries=0, timeout=HANG_GUARD_S)
        stream = client.chat.completions.create(
            model="tiny", messages=CHAT, max_tokens=400, stream=True, logit_bias=running.no_eos()
        )
        with pytest.raises(openai.APIError, match="the device went away"):
            for i, _ in enumerate(stream):
                if i == 2:
                    broken.set()
    finally:
        running.close()


def test_a_cancelled_stream_ends_with_an_error_not_a_finish(served):
    def cancel(events: list) -> None:
        request_id = int(events[0]["id"].split("-")[1])  # chatcmpl-<request id>-<hex>
        served.engine.cancel(request_id)  # as the app cancels a served reply its person stopped

    body = {"messages": CHAT, "max_tokens": 400, "stream": True, "logit_bias": served.no_eos()}
    events = _stream_until(served.url + "/chat/completions", body, cancel)
    _ended_with_an_error(events, "cancelled")


def test_stopping_the_server_mid_stream_ends_the_stream_with_an_error(tiny_folder):
    running = Served(tiny_folder)
    stopper: list[threading.Thread] = []

    def stop(_events: list) -> None:
        running.pause()  # the reply cannot finish first
        stopper.append(threading.Thread(target=running.server.stop, kwargs={"timeout": HANG_GUARD_S}))
        stopper[0].start()

    try:
        body = {"messages": CHAT, "max_tokens": 400, "stream": True, "logit_bias": running.no_eos()}
        events = _stream_until(running.url + "/chat/completions", body, stop)
        _ended_with_an_error(events, "server_stopped")
    finally:
        for thread in stopper:
            thread.join(HANG_GUARD_S)
        running.close()


def test_a_whole_reply_cut_by_a_stop_is_an_error_status(tiny_folder):
    running = Served(tiny_folder)
    answers: list[httpx.Response] = []
    body = {"messages": CHAT, "max_tokens": 400, "logit_bias": running.no_eos()}
    asking = threading.Thread(target=lambda: answers.append(post(running.url + "/chat/completions", body)))
    try:
        asking.start()
        running.pause()  # the reply cannot finish first
        until(running.engine.busy, "the request reaching the engine")
        running.server.stop(timeout=HANG_GUARD_S)
        asking.join(HANG_GUARD_S)
        assert answers[0].status_code == 503 and is_openai_error(answers[0].json())
        assert answers[0].json()["error"]["code"] == "server_stopped"
    finally:
        running.close()
