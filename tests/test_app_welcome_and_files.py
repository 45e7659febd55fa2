"""Small confusions a new user met (issue 24, points 12, 13, 15 and 20): the welcome's words
after a new chat, where file dialogs open, telling conversations with the same title apart,
and where a model's loading progress shows. Keys go to the focused widget, as a person's
would; file dialogs are Qt's own, answered by typing a path into them."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine.params import SamplingParams  # noqa: E402
from tests.test_app import TIMEOUT, close_window, open_window, profile  # noqa: E402, F401

QUESTION_WORDS = "press Enter to send the question below"
EMPTY_WORDS = "type a message below and press Enter to send it"


def press(qtbot, key, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    target = QApplication.focusWidget()
    assert target is not None, "no widget has the keyboard focus"
    qtbot.keyClick(target, key, modifier)


def shown_text(window) -> str:
    window._redraw_if_dirty()
    return window.chat.toPlainText()


# 12. The welcome after Ctrl+N ---------------------------------------------------------------------


def test_the_welcome_speaks_of_a_question_only_while_one_is_in_the_box(qtbot, profile, tiny_folder):  # noqa: F811
    window = open_window(qtbot, profile, str(tiny_folder))
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.composer)
    assert window.composer.toPlainText()  # the first question, typed in already
    assert QUESTION_WORDS in shown_text(window)
    window.controls.set_params(SamplingParams(max_tokens=2))
    press(qtbot, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
    press(qtbot, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)  # a new chat: the box is empty
    assert window.model.conversation is None and window.composer.toPlainText() == ""
    text = shown_text(window)
    assert "question" not in text.splitlines()[-1] and EMPTY_WORDS in text, text.splitlines()[-1]
    qtbot.keyClicks(QApplication.focusWidget(), "Why is the sky blue?")
    assert QUESTION_WORDS in shown_text(window)
    press(qtbot, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    press(qtbot, Qt.Key.Key_Delete)
    assert EMPTY_WORDS in shown_text(window)
    close_window(window)
