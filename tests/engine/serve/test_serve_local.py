"""A server without an API key answers this machine's own clients only (real HTTP on
127.0.0.1, the tiny model): a web page's "simple" cross-origin POST (``text/plain``) is a 415,
a DNS-rebinding page's foreign ``Host`` a 421, a CORS preflight grants no origin; with a key,
both are answered as before."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.engine.serve.serving import CHAT, HANG_GUARD_S, KEY, Served, is_openai_error

BODY = json.dumps({"messages": CHAT, "max_tokens": 2})


def test_a_text_plain_post_is_refused_without_a_key(served):
    answer = httpx.post(
        served.url + "/chat/completions", content=BODY, headers={"Content-Type": "text/plain"}, timeout=HANG_GUARD_S
    )
    assert answer.status_code == 415 and is_openai_error(answer.json())
    missing = httpx.post(served.url + "/chat/completions", content=BODY, timeout=HANG_GUARD_S)
    assert missing.status_code == 415 and is_openai_error(missing.json())
    typed = {"Content-Type": "application/json; charset=utf-8"}
    ok = httpx.post(served.url + "/chat/completions", content=BODY, headers=typed, timeout=HANG_GUARD_S)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "192.168.1.7"])
def test_a_foreign_host_is_refused_without_a_key(served, host):
    headers = {"Host": host.format(port=served.port)}
    listing = httpx.get(served.url + "/models", headers=headers, timeout=HANG_GUARD_S)
    assert listing.status_code == 421 and is_openai_error(listing.json())
    headers["Content-Type"] = "application/json"
    asked = httpx.post(served.url + "/chat/completions", content=BODY, headers=headers, timeout=HANG_GUARD_S)
    assert asked.status_code == 421 and is_openai_error(asked.json())


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "localhost", "[::1]:{port}", "127.0.0.1"])
def test_the_loopback_names_are_answered(served, host):
    answer = httpx.get(served.url + "/models", headers={"Host": host.format(port=served.port)}, timeout=HANG_GUARD_S)
    assert answer.status_code == 200, answer.text


def test_a_cors_preflight_grants_no_origin(served):
    preflight = {
        "Origin": "http://evil.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    answer = httpx.request("OPTIONS", served.url + "/chat/completions", headers=preflight, timeout=HANG_GUARD_S)
    assert answer.status_code < 300
    assert not [name for name in answer.headers if name.lower().startswith("access-control-allow")]


def test_with_a_key_a_text_plain_post_and_another_host_are_answered(tiny_folder):
    running = Served(tiny_folder, api_key=KEY)
    try:
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "text/plain", "Host": "lab.example"}
        answer = httpx.post(running.url + "/chat/completions", content=BODY, headers=headers, timeout=HANG_GUARD_S)
        assert answer.status_code == 200, answer.text
        del headers["Authorization"]
        refused = httpx.post(running.url + "/chat/completions", content=BODY, headers=headers, timeout=HANG_GUARD_S)
        assert refused.status_code == 401 and is_openai_error(refused.json())
    finally:
        running.close()
