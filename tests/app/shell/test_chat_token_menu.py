"""Right-clicking a reply token and special-token marks (issue 24, point 22): the chat's menu is
the app's own (Qt's offered "Copy Link Location", a token being a link), and
``⟨<|im_end|>⟩`` is never split across lines, in a compare column as anywhere."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt, QTimer  # noqa: E402
from PySide6.QtGui import QCursor, QFontMetrics, QTextCursor, QTextDocument  # noqa: E402
from PySide6.QtWidgets import QApplication, QMenu  # noqa: E402

from app.views.theme import LIGHT  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, token_point  # noqa: E402
from tests.support.chain_steps import chain_step  # noqa: E402


def right_click(qtbot, window, ref, choose) -> list[str]:
    """Right-click token ``ref`` with the mouse; ``choose(menu)`` runs while the menu is open
    (it triggers an action or not), then the menu closes. The menu's items, submenus'
    included."""
    seen: list[str] = []
    given_up: list[bool] = []  # the wait below ended without a menu: stop looking for one

    def act() -> None:
        menu = QApplication.activePopupWidget()
        if not isinstance(menu, QMenu):
            if not given_up:
                QTimer.singleShot(20, act)  # not shown yet (a busy machine): look again
            return
        for action in menu.actions():
            seen.append(action.text())
            if action.menu() is not None:
                seen.extend(f"  {sub.text()}" for sub in action.menu().actions())
        try:
            choose(menu)
        finally:
            menu.close()  # whatever choose did: the menu must not stay open, waiting

    # The menu runs its own event loop inside the click: this looks for it from there, as
    # often as it takes, where a fixed delay raced the menu and left it open on a busy machine.
    QTimer.singleShot(0, act)
    # Through the window, as the platform delivers it: Qt makes the context menu event of a
    # right button press there (a press sent to the widget itself makes none), for the widget
    # under the pointer: moved there first.
    point = window.chat.viewport().mapTo(window, token_point(window, ref))
    QCursor.setPos(window.mapToGlobal(point))
    qtbot.mouseClick(window.windowHandle(), Qt.MouseButton.RightButton, pos=point)
    try:
        qtbot.waitUntil(lambda: bool(seen), timeout=TIMEOUT)
    finally:
        given_up.append(True)
    return seen


def action_named(menu: QMenu, start: str):
    action = next((a for a in menu.actions() if a.text().replace("&", "").startswith(start)), None)
    assert action is not None, (start, [a.text() for a in menu.actions()])
    return action


def test_the_token_menu_is_the_apps_own(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    send(qtbot, window, "hello there", SamplingParams(max_tokens=8, top_logprobs=5, logit_bias=no_eos))
    (entry,) = [e for e in window.entries if e.role == "assistant"]
    index = next(i for i, s in enumerate(entry.steps) if i > 0 and s.text.strip())  # a token with text
    ref = (entry.stream, index)
    step = entry.steps[index]

    shown = right_click(qtbot, window, ref, lambda menu: action_named(menu, "Copy token").trigger())
    words = [text.replace("&", "") for text in shown]
    assert not any("Link Location" in text for text in words), words
    for start in ("Copy token", "Copy reply text", "Inspect this token", "Branch from here with", "Compare"):
        assert any(text.startswith(start) for text in words), (start, words)
    assert QApplication.clipboard().text() == step.text

    right_click(qtbot, window, ref, lambda menu: action_named(menu, "Copy reply text").trigger())
    assert QApplication.clipboard().text() == "".join(s.text for s in entry.steps)

    # Branch from here with the most likely other candidate: a new branch from that token.
    others = sorted((c for c in step.top if c.token_id != step.token_id), key=lambda c: -c.logprob)

    def branch(menu: QMenu) -> None:
        action_named(menu, "Branch from here with").menu().actions()[0].trigger()

    right_click(qtbot, window, ref, branch)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    message = window.model.last_assistant()
    assert len(message.branches) == 2
    new = message.branch.steps
    assert [s.token_id for s in new[:index]] == [s.token_id for s in entry.steps[:index]]
    assert new[index].token_id == others[0].token_id and new[index].forced
    close_window(window)


def lines_of(doc: QTextDocument, start: int, length: int) -> set[int]:
    """The layout lines that characters ``start`` … ``start + length`` of ``doc`` lie on."""
    block = doc.findBlock(start)
    layout = block.layout()
    lines = set()
    for position in range(start - block.position(), start - block.position() + length):
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            if line.textStart() <= position < line.textStart() + line.textLength():
                lines.add(i)
    return lines


def test_special_token_marks_are_never_split(qtbot):
    """``⟨<|im_end|>⟩`` wrapped across lines in compare columns (a break after "|"): at
    every column width, its characters are on one line."""
    from app.views.chat_sections import columns_format, insert_token, token_format

    texts = [" The", " capital", " of", " France", " is", " Paris"]
    steps = [replace(chain_step(index=i), text=t, piece=t) for i, t in enumerate(texts)]
    steps.append(replace(chain_step(index=len(texts)), text="", piece="<|im_end|>"))
    widest = QFontMetrics(QTextDocument().defaultFont()).horizontalAdvance("⟨<|im_end|>⟩")
    for width in range(2 * widest + 40, 8 * widest, 3):
        doc = QTextDocument()
        doc.setTextWidth(width)
        table = QTextCursor(doc).insertTable(1, 2, columns_format(2))  # a compare run: a column each
        cell = table.cellAt(0, 0).firstCursorPosition()
        for i, step in enumerate(steps):
            insert_token(cell, step, token_format(f"tok:0:{i}", step, False, False, LIGHT), LIGHT)
        doc.size()  # laid out
        begin = doc.find("⟨").selectionStart()
        end = doc.find("⟩").selectionEnd()
        assert begin >= 0 and end > begin
        assert len(lines_of(doc, begin, end - begin)) == 1, (width, doc.toPlainText())
