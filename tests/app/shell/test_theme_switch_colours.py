"""Switching themes recolours what Qt and pyqtgraph keep from the theme before (issue 51,
#12): in the dark theme tooltips were light grey on light grey (a tooltip keeps the platform's
palette), and back in light the timeline's draft-acceptance legend (a row's title, coloured
when its text was set) stayed near-white. The theme is switched from the View menu with keys."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QColor, QPalette  # noqa: E402
from PySide6.QtWidgets import QApplication, QMenu, QToolTip  # noqa: E402

from app.views.theme import DARK, LIGHT  # noqa: E402
from tests.app.shell.test_app_draft import params, use_draft  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402


def choose_theme(qtbot, window, name: str) -> None:
    """View → Theme → ``name``, with the keyboard."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=TIMEOUT)
    qtbot.keyClick(window, Qt.Key.Key_V, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu), timeout=TIMEOUT)
    view = QApplication.activePopupWidget()
    theme = next(a for a in view.actions() if a.menu() is not None and a.text().replace("&", "") == "Theme")
    view.setActiveAction(theme)
    qtbot.keyClick(view, Qt.Key.Key_Right)
    qtbot.waitUntil(lambda: QApplication.activePopupWidget() is theme.menu(), timeout=TIMEOUT)
    submenu = theme.menu()
    target = next(a for a in submenu.actions() if a.text().replace("&", "").lower() == name)
    submenu.setActiveAction(target)
    qtbot.keyClick(submenu, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: target.isChecked(), timeout=TIMEOUT)


def text_color(label) -> QColor:
    """The colour a pyqtgraph label (a ``LabelItem``, or an axis's text item) draws its
    text in: its HTML's first colour."""
    document = getattr(label, "item", label).document()
    fragment = document.begin().begin().fragment()
    return fragment.charFormat().foreground().color()


def contrast(a: QColor, b: QColor) -> float:
    return abs(a.lightnessF() - b.lightnessF())


def test_a_tooltip_in_the_dark_theme_is_readable(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    choose_theme(qtbot, window, "dark")
    widget = window.composer
    QToolTip.showText(widget.mapToGlobal(QPoint(10, 10)), "logit_bias: token 99999 is not in the vocabulary", widget)
    qtbot.waitUntil(QToolTip.isVisible, timeout=TIMEOUT)
    tip = next(w for w in QApplication.topLevelWidgets() if w.objectName() == "qtooltip_label" and w.isVisible())
    base = tip.palette().color(QPalette.ColorRole.ToolTipBase)
    text = tip.palette().color(QPalette.ColorRole.ToolTipText)
    assert base.lightnessF() < 0.3 and contrast(base, text) > 0.5, (base.name(), text.name())
    image = tip.grab().toImage()
    image.save("/tmp/ls/tooltip_dark.png")
    assert QColor(image.pixel(image.width() // 2, 1)).lightnessF() < 0.3  # drawn on the dark base
    QToolTip.hideText()
    choose_theme(qtbot, window, "light")
    close_window(window)


def test_the_acceptance_legend_follows_the_theme_back_to_light(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    use_draft(qtbot, window, tiny_folder).close()  # the model as its own draft
    send(qtbot, window, "the cat", params(window))
    row = next(c for c in window.step_analyses if c.row.__class__.__name__ == "AcceptanceRow")
    choose_theme(qtbot, window, "dark")
    row.refresh()
    title = row.row.plot.titleLabel
    assert row.row.plot.isVisible() and "accepted" in title.text
    assert text_color(title) == QColor(DARK.foreground)  # light on the dark plot
    choose_theme(qtbot, window, "light")
    window._redraw_if_dirty()
    assert text_color(title) == QColor(LIGHT.foreground), title.item.toHtml()
    left = row.row.plot.getAxis("left")
    assert text_color(left.label) == QColor(LIGHT.foreground)
    window.timeline.grab().save("/tmp/ls/acceptance_light_after_dark.png")
    close_window(window)
