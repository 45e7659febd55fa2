"""The Chat menu in an empty chat: every item was enabled, doing nothing when chosen. Each
now says why it cannot run (its tooltip), and comes on when it can: real typing enables
Send, a reply enables Regenerate and Replay, a replay that changed something enables
Branch, Stop is on while a reply is written."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402


def chat_items(window) -> dict[str, object]:
    menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Chat")
    return {a.text(): a for a in menu.actions() if not a.isSeparator()}


def test_chat_items_in_an_empty_chat_say_why_and_come_on_when_they_can(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.new_chat()
    window.composer.clear()
    items = chat_items(window)
    off = {
        "Send": "Type a message first",
        "Stop": "Nothing is running",
        "Regenerate": "No reply in this chat",
        "Continue the interrupted reply": "No interrupted reply",
        "Replay this reply under the current settings": "Select a token of a saved reply",
        "Branch at the replay's first change": "Replay a reply first",
    }
    for text, why in off.items():
        assert not items[text].isEnabled(), text
        assert why in items[text].toolTip(), (text, items[text].toolTip())
    assert items["Compare settings side by side"].isEnabled()  # a mode for the next send

    qtbot.keyClicks(window.composer, "hello")  # real typing
    assert items["Send"].isEnabled() and "Type a message" not in items["Send"].toolTip()

    window.controls.set_params(SamplingParams(max_tokens=40, top_logprobs=5))
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(window.busy, timeout=TIMEOUT)
    assert items["Stop"].isEnabled() and not items["Regenerate"].isEnabled()
    assert "being written" in items["Regenerate"].toolTip()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert not items["Stop"].isEnabled() and items["Regenerate"].isEnabled()
    assert not items["Send"].isEnabled()  # the composer was emptied by the send
    entry = [e for e in window.entries if e.role == "assistant"][-1]
    window.select_token((entry.stream, 2))
    assert items["Replay this reply under the current settings"].isEnabled()

    # A replay under other settings changes the reply: Branch comes on.
    window.controls.set_params(
        SamplingParams(max_tokens=40, top_logprobs=5, logit_bias={entry.steps[0].token_id: -100.0})
    )
    items["Replay this reply under the current settings"].trigger()
    qtbot.waitUntil(lambda: window.score_controller().result is not None, timeout=TIMEOUT)
    assert window.score_controller().result.first_change is not None
    assert items["Branch at the replay's first change"].isEnabled()
    close_window(window)


def test_send_on_a_loaded_model_only(qtbot, profile, tiny_folder):
    """A reply being written makes Send say so, rather than take the text and do nothing."""
    window = open_window(qtbot, profile, str(tiny_folder))
    items = chat_items(window)
    send(qtbot, window, "hi", SamplingParams(max_tokens=40), wait=False)
    qtbot.waitUntil(window.busy, timeout=TIMEOUT)
    qtbot.keyClicks(window.composer, "next")
    assert not items["Send"].isEnabled() and "stop it first" in items["Send"].toolTip()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert items["Send"].isEnabled()
    close_window(window)
