"""Scoring a text switches "Colour tokens by probability" on to show it; that was then on
for every later chat and saved as the person's choice. Now it goes with the scored text's
conversation, unless the person sets the switch themselves (real clicks on it)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QSettings, Qt  # noqa: E402

from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402


def score(qtbot, window) -> None:
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)


def click(qtbot, box) -> None:
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))


def test_scoring_colours_its_text_without_changing_the_choice(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    toggle = window.central.color_toggle
    assert not toggle.isChecked()
    score(qtbot, window)
    assert toggle.isChecked() and window.chat.writer.color_tokens  # the scored text is coloured
    window.new_chat()
    assert not toggle.isChecked() and not window.chat.writer.color_tokens  # a new chat: as chosen

    # Scored again, then the app quits with the scored text open: the choice saved is "off".
    score(qtbot, window)
    assert toggle.isChecked()
    close_window(window)
    settings = QSettings(profile[1].fileName(), QSettings.Format.IniFormat)
    assert settings.value("color_tokens") == "false"

    # The person's own click is theirs: kept through a new chat and saved.
    window = open_window(qtbot, (profile[0], settings), str(tiny_folder))
    toggle = window.central.color_toggle
    assert not toggle.isChecked()
    score(qtbot, window)
    click(qtbot, toggle)  # off
    click(qtbot, toggle)  # on again, by hand
    assert toggle.isChecked()
    window.new_chat()
    assert toggle.isChecked()
    close_window(window)
    assert QSettings(profile[1].fileName(), QSettings.Format.IniFormat).value("color_tokens") == "true"
