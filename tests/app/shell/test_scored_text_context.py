"""A text scored without a prompt shows its first token, the context the rest was read
from, before the scored tokens: "The Eiffel Tower is…" read "Eiffel Tower is…" on screen
(issue 51, #14). The context is muted, not a token (no shade, nothing to select), and says
so when hovered."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QTextCursor  # noqa: E402
from PySide6.QtWidgets import QToolTip  # noqa: E402

from app.model.scored import score_context  # noqa: E402
from app.store.scored_labels import score_label  # noqa: E402
from app.views.chat_view import plain_text  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402

TEXT = "The Eiffel Tower is in Paris, and the hat of the man is in the tin."


def test_score_context_is_what_of_the_label_comes_before_the_scored_tokens():
    label = score_label(TEXT)
    assert score_context(label, " Eiffel Tower is in Paris, and the hat of the man is in the tin.") == "The"
    assert score_context(label, " Eiffel") == "The"  # the first token streamed only
    assert score_context(label, TEXT) == ""  # a BOS was the context: every token scored
    assert score_context("What is in Paris?", "The Eiffel Tower.") == ""  # scored as a reply


def test_a_scored_text_shows_its_first_token_as_the_context(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    branch = window.model.last_assistant().branch
    assert branch.text != TEXT and TEXT.endswith(branch.text)  # the tiny model's first token is context
    context = TEXT[: len(TEXT) - len(branch.text)]
    assert context.strip()
    doc = window.chat.document()
    whole = QTextCursor(doc)
    whole.select(QTextCursor.SelectionType.Document)
    assert TEXT in plain_text(whole)  # the whole text on screen, its context included
    window.chat.grab().save("/tmp/ls/scored_context.png")

    # The context is drawn before the first scored token and is not a token.
    first = window.chat.writer.span_of((("branch", branch.id), 0))
    assert first is not None
    cursor = QTextCursor(doc)
    cursor.setPosition(first[0] - len(context))
    cursor.setPosition(first[0], QTextCursor.MoveMode.KeepAnchor)
    assert cursor.selectedText() == context
    cursor.setPosition(first[0] - len(context) + 1)
    assert cursor.charFormat().anchorHref() == "ctx:"
    assert cursor.charFormat().fontItalic()
    cursor.setPosition(first[0] - len(context))
    left = window.chat.cursorRect(cursor)
    cursor.setPosition(first[0])
    point = QPoint((left.center().x() + window.chat.cursorRect(cursor).center().x()) // 2, left.center().y())
    assert window.chat.ref_at(point) is None
    qtbot.mouseMove(window.chat.viewport(), point)
    qtbot.waitUntil(lambda: QToolTip.isVisible(), timeout=TIMEOUT)
    assert "context" in QToolTip.text() and "not scored" in QToolTip.text()
    before = window.model.selection
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert window.model.selection == before  # a click on the context selects no token
    close_window(window)
