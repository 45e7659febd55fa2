"""Models → Check precision… under float32 (the default) is greyed out, and its reason must
reach the person (issue 51, #9): the Models menu showed no tooltips, so the greyed item said
nothing. Its text now says why, and hovering it shows the whole reason. Real keys and mouse."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication, QMenu, QToolTip  # noqa: E402

from app.model.precision import CHOICE  # noqa: E402
from app.model.precision_check import ALREADY_FLOAT32  # noqa: E402
from app.shell.controllers.precision_check import ACTION_TEXT, FLOAT32_TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402


def open_models_menu(qtbot, window) -> QMenu:
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=TIMEOUT)
    qtbot.keyClick(window, Qt.Key.Key_M, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu), timeout=TIMEOUT)
    return QApplication.activePopupWidget()


def test_check_precision_under_float32_says_why_in_the_menu(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.model_info.precision == "float32"
    action = window.analysis_actions.check_precision
    menu = open_models_menu(qtbot, window)
    assert action in menu.actions()
    assert not action.isEnabled()
    assert action.text() == FLOAT32_TEXT  # seen without hovering
    assert action.toolTip() == ALREADY_FLOAT32
    menu.grab().save("/tmp/ls/models_menu_float32.png")

    # Hovering the greyed item shows the whole reason.
    rect = menu.actionGeometry(action)
    qtbot.mouseMove(menu, rect.center())
    qtbot.waitUntil(lambda: QToolTip.isVisible() and QToolTip.text() == ALREADY_FLOAT32, timeout=TIMEOUT)
    qtbot.keyClick(menu, Qt.Key.Key_Escape)
    close_window(window)


def test_check_precision_in_float16_keeps_its_own_text(qtbot, profile, tiny_folder):
    CHOICE.save(profile[1], str(tiny_folder), "float16")
    window = open_window(qtbot, profile, str(tiny_folder))
    action = window.analysis_actions.check_precision
    assert action.text() == ACTION_TEXT and "Select a token" in action.toolTip()
    close_window(window)
