"""No request field that would change the answer is ignored: every field the server knows is
implemented, left alone for a stated reason, or refused with a 400 naming it; any other
field (a misspelling) is refused too. Checked over plain HTTP and through the ``openai``
SDK's ``extra_body``, and docs/SERVING.md's table against ``engine.serve.known_fields``."""

from __future__ import annotations

import re

import openai
import pytest

from engine.serve.known_fields import BOTH, CHAT_ONLY, COMPLETIONS_ONLY, IGNORED, REFUSED
from engine.serve.request_fields import FieldError, read_request
from tests.engine.serve.serving import CHAT, is_openai_error, post
from tests.support.paths import ROOT

# A value of each refused field that is not its neutral one: what a client asking for it sends.
ASKING = {
    "best_of": 2,
    "suffix": " the end.",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "functions": [{"name": "f", "parameters": {}}],
    "tool_choice": "required",
    "function_call": {"name": "f"},
    "audio": {"voice": "alloy", "format": "wav"},
    "modalities": ["text", "audio"],
    "reasoning_effort": "low",
    "verbosity": "low",
    "web_search_options": {},
    "chat_template_kwargs": {"enable_thinking": False},
    "ignore_eos": True,
    "min_keep": 1,
    "n_keep": 16,
    "t_max_predict_ms": 100,
    "n_indent": 2,
    "return_tokens": True,
    "lora": [{"id": 0, "scale": 1.0}],
}


def body_for(chat: bool, **fields) -> dict:
    return {"messages": CHAT, **fields} if chat else {"prompt": "Once upon a time", **fields}


def test_every_refused_field_has_a_value_that_asks_for_it():
    assert set(ASKING) == set(REFUSED)


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_refused_field_is_a_400_naming_it_over_http(served, name, chat):
    path = "/chat/completions" if chat else "/completions"
    answer = post(served.url + path, body_for(chat, max_tokens=2, **{name: ASKING[name]}))
    assert answer.status_code == 400, answer.text
    assert is_openai_error(answer.json())
    assert answer.json()["error"]["param"] == name
    assert answer.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_field_at_its_neutral_value_is_taken(name):
    neutral = {"best_of": 1, "modalities": ["text"], "tool_choice": "none", "min_keep": 0, "n_indent": 0}
    read_request(body_for(False, **{name: neutral.get(name)}), chat=False)
    if name not in COMPLETIONS_ONLY:
        read_request(body_for(True, **{name: neutral.get(name)}), chat=True)


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_a_misspelled_field_is_a_400_naming_it(served, client, chat):
    path = "/chat/completions" if chat else "/completions"
    answer = post(served.url + path, body_for(chat, max_tokens=2, temprature=0.2))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "temprature"
    assert "temprature" in answer.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as caught:  # the SDK passes extra_body through unread
        if chat:
            client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=2, extra_body={"temprature": 0.2})
        else:
            client.completions.create(model="tiny", prompt="Once", max_tokens=2, extra_body={"temprature": 0.2})
    assert caught.value.status_code == 400 and caught.value.body["param"] == "temprature"


def test_the_other_endpoints_field_is_refused_naming_it(served):
    for path, body, name in (
        ("/chat/completions", body_for(True, prompt="x"), "prompt"),
        ("/completions", body_for(False, messages=CHAT), "messages"),
        ("/completions", body_for(False, top_logprobs=3), "top_logprobs"),
    ):
        answer = post(served.url + path, {**body, "max_tokens": 2})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == name, (path, answer.text)


def test_a_message_key_that_is_not_read_is_refused_naming_it():
    with pytest.raises(FieldError) as caught:
        read_request({"messages": [{"role": "user", "content": "hi", "name": "Ann"}]}, chat=True)
    assert caught.value.param == "messages[0].name"
    # The openai SDK's own assistant message sent back: its empty keys are taken.
    sent_back = {"role": "assistant", "content": "hi", "refusal": None, "tool_calls": None, "annotations": []}
    read_request({"messages": [*CHAT, sent_back]}, chat=True)


def test_fields_that_change_nothing_a_client_receives_are_taken(served, client):
    ignored = {"user": "u1", "metadata": {"a": "b"}, "store": False, "cache_prompt": True, "id_slot": 0}
    one = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4, temperature=0, extra_body=ignored)
    two = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4, temperature=0)
    assert one.choices[0].message.content == two.choices[0].message.content


def test_the_docs_table_is_the_servers_table():
    text = (ROOT / "docs" / "SERVING.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \|", text, re.M)
    table = {name: (where, status) for name, where, status in rows}
    assert len(table) == len(rows), "a field listed twice"
    ours = {n: ("both", "implemented") for n in BOTH}
    ours |= {n: ("chat", "implemented") for n in CHAT_ONLY}
    ours |= {n: ("completions", "implemented") for n in COMPLETIONS_ONLY}
    ours |= {n: ("both", "ignored") for n in IGNORED}
    ours |= {n: ("both", "refused") for n in REFUSED}
    assert table == ours
