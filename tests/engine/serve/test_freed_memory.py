"""The server gives the memory a burst of requests freed back to the system once idle
(glibc keeps it in each thread's arena otherwise: figure 28 of the bench measures it)."""

from __future__ import annotations

import sys
import threading

import pytest

from engine.serve import engine_loop
from engine.serve.freed_memory import give_back_freed_memory
from tests.engine.serve.serving import CHAT, HANG_GUARD_S, Served


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux only")
def test_the_allocators_free_pages_can_be_given_back_here():
    assert give_back_freed_memory() is True


def test_the_server_gives_back_freed_memory_once_idle_after_requests(tiny_folder, monkeypatch):
    given = threading.Event()
    monkeypatch.setattr(engine_loop, "give_back_freed_memory", given.set)
    served = Served(tiny_folder)
    try:
        import openai

        client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=HANG_GUARD_S)
        given.clear()  # whatever the start did: from the request on
        reply = client.chat.completions.create(model="m", messages=CHAT, max_tokens=4)
        assert reply.choices[0].finish_reason == "length"
        assert given.wait(HANG_GUARD_S), "hang guard: the idle server never gave its freed memory back"
    finally:
        served.close()


def test_no_memory_is_given_back_between_the_steps_of_a_reply(tiny_folder, monkeypatch):
    """Only once idle: a busy loop finds no command waiting at every step, and gave the
    allocator's pages back there (a malloc_trim per step) before."""
    busy_calls = []
    served = Served(tiny_folder)
    monkeypatch.setattr(engine_loop, "give_back_freed_memory", lambda: busy_calls.append(served.session.has_work()))
    try:
        import openai

        client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0, timeout=HANG_GUARD_S)
        no_eos = served.no_eos()
        reply = client.chat.completions.create(model="m", messages=CHAT, max_tokens=24, logit_bias=no_eos)
        assert reply.choices[0].finish_reason == "length"
    finally:
        served.close()
    assert not any(busy_calls), f"memory given back {sum(busy_calls)} times while a reply was being written"
