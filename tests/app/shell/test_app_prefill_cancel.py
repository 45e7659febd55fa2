"""A reply stopped (Esc) during its prompt's prefill leaves a trace in the chat, and the
inspector and the timeline stop showing the previous reply's token (the tiny model with a
long context, offscreen; real key presses to the focused widget)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.app.shell.test_app_window import press  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402


def test_a_reply_cancelled_in_its_prefill_says_so_and_clears_the_inspector(qtbot, profile, long_context_folder):
    window = open_window(qtbot, profile, str(long_context_folder))
    window.activateWindow()
    window.composer.setFocus()
    window.controls.set_params(SamplingParams(max_tokens=4, top_logprobs=3))
    window.composer.setPlainText("hello")
    press(qtbot, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    assert window.inspector.step is not None  # the first reply's last token, followed

    # A long prompt (~7,000 tokens), stopped with Esc while it is prefilled.
    prefill: list[tuple[int, int]] = []
    window.engine.worker.prefill_progressed.connect(lambda _tag, done, total: prefill.append((done, total)))
    window.composer.setPlainText(" ".join(f"word{i % 97}" for i in range(1000)))
    press(qtbot, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(prefill) and prefill[-1][0] >= 500, timeout=TIMEOUT)
    assert prefill[-1][0] < prefill[-1][1] - 1000, "the prefill ended too soon for this test"
    press(qtbot, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()

    last = window.entries[-1]
    assert last.role == "assistant" and not last.steps
    assert last.note == "[cancelled before the first token]"
    assert "cancelled before the first token" in window.chat.toPlainText()
    assert window.model.selection is None
    assert window.inspector.step is None and window.inspector.candidates == []
    assert "No token selected" in window.inspector.title.text()
    assert window.timeline.steps == [] and "No token selected" in window.timeline.hint.text()

    # The next reply is followed again, and the trace stays with its turn.
    window.composer.setPlainText("and now?")
    press(qtbot, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    assert window.inspector.step is window.model.last_assistant().branch.steps[-1]
    assert window.chat.toPlainText().count("cancelled before the first token") == 1
    close_window(window)
