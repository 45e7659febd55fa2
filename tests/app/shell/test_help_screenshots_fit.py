"""Help (F1) drew the README's screenshots at their own size, 1400 px wide, cropped at the
window's edge (issue 51, #15). Each is now scaled to the page's width, its proportions kept,
and follows the window's width. F1 pressed for real."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QImageReader  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402


def images(browser) -> list:
    """(name, width, height) of every image drawn on the page."""
    found = []
    block = browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isImageFormat():
                image = fmt.toImageFormat()
                found.append((image.name(), image.width(), image.height()))
            it += 1
        block = block.next()
    return found


def test_helps_screenshots_fit_the_page(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=TIMEOUT)
    qtbot.keyClick(window, Qt.Key.Key_F1)
    help_window = window.window_actions.help_window
    qtbot.waitUntil(lambda: help_window is not None and help_window.isVisible(), timeout=TIMEOUT)
    help_window = window.window_actions.help_window
    browser = help_window.browser
    shown = images(browser)
    assert shown, "the README has screenshots"
    room = browser.viewport().width()
    for name, width, height in shown:
        natural = QImageReader(str(ROOT / name)).size()
        assert natural.width() > room  # a screenshot wider than the page: what was cropped
        assert 0 < width <= room, (name, width, room)
        assert height == pytest.approx(natural.height() * width / natural.width(), abs=1)
    help_window.grab().save("/tmp/ls/help_screenshots.png")

    help_window.resize(help_window.width() + 200, help_window.height())
    qtbot.waitUntil(lambda: browser.viewport().width() > room, timeout=TIMEOUT)
    wider = images(browser)
    assert wider[0][1] > shown[0][1]  # the page wider: the screenshot too
    close_window(window)
