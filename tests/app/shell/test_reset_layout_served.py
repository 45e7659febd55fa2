"""View → Reset layout with the Served list shown (as serving shows it) stacked Served above
Sampling, leaving Sampling ~170 px, instead of tabbing them as the window first does (issue
51, #15). Reset layout is chosen from the View menu with keys."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication, QMenu  # noqa: E402

from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402


def choose_in_view_menu(qtbot, window, text: str) -> None:
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=TIMEOUT)
    qtbot.keyClick(window, Qt.Key.Key_V, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu), timeout=TIMEOUT)
    menu = QApplication.activePopupWidget()
    action = next(a for a in menu.actions() if a.text().replace("&", "") == text)
    menu.setActiveAction(action)
    qtbot.keyClick(menu, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: QApplication.activePopupWidget() is None, timeout=TIMEOUT)


def test_reset_layout_tabs_served_with_sampling(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    served, sampling = window.serving.dock, window.controls_dock
    window.serving.list_action.trigger()  # shown, as serving shows it
    qtbot.waitUntil(served.isVisible, timeout=TIMEOUT)
    assert served in window.tabifiedDockWidgets(sampling)  # as the window first places it
    choose_in_view_menu(qtbot, window, "Reset layout")
    assert served in window.tabifiedDockWidgets(sampling)
    qtbot.waitUntil(lambda: sampling.isVisible() and not sampling.visibleRegion().isEmpty(), timeout=TIMEOUT)
    assert sampling.height() > window.height() // 2  # the whole left side, not stacked
    window.grab().save("/tmp/ls/reset_layout_served.png")
    close_window(window)
