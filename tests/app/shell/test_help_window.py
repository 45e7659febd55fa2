"""Help → Logitscope Help (F1): the README and the docs that ship with the app, offline —
its screenshots drawn, a link to a doc opened in the same window, Back returning."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QUrl  # noqa: E402
from PySide6.QtGui import QTextDocument  # noqa: E402

from tests.support.app_window import close_window, open_window  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402


def test_help_opens_the_readme_and_follows_its_links_offline(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    item = next(a for a in menu.actions() if a.text() == "Logitscope Help")
    assert item.isEnabled() and not item.shortcut().isEmpty()  # F1 (the platform's help key)
    item.trigger()
    help_window = window.window_actions.help_window
    qtbot.waitUntil(help_window.isVisible)
    browser = help_window.browser
    assert browser.source() == QUrl.fromLocalFile(str(ROOT / "README.md"))
    text = browser.toPlainText()
    first = next(line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if line.strip())
    assert first.lstrip("# ").strip() in text and "make run" in text
    image = browser.document().resource(QTextDocument.ResourceType.ImageResource, QUrl("docs/screenshots/main.png"))
    assert image is not None and not image.isNull()  # the screenshot is drawn, not a broken box

    # A link of the README to a doc opens it here; Back goes back to the README.
    browser.anchorClicked.emit(QUrl("docs/REMOTE.md"))
    assert browser.source() == QUrl.fromLocalFile(str(ROOT / "docs" / "REMOTE.md"))
    assert "Remote models" in browser.toPlainText()
    assert help_window.back.isEnabled()
    help_window.back.click()
    assert browser.source() == QUrl.fromLocalFile(str(ROOT / "README.md"))
    close_window(window)
    assert not help_window.isVisible()  # it goes with the main window


def test_the_packaged_app_carries_the_help():
    spec = (ROOT / "packaging" / "logitscope.spec").read_text(encoding="utf-8")
    assert '"help"' in spec and "README.md" in spec and "screenshots" in spec
