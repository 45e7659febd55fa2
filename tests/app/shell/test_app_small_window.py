"""The window at 800×600 and 1500×900 (issue 24, points 21 and 23), on the tiny model: the
Sampling dock needs no sideways scrolling and every control in it is whole, the chat's text
area keeps a usable height, the colour switch and its legend are whole, and a scored text's
third timeline row gets room of its own."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QRectF  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QSlider,
    QTabBar,
    QWidget,
)

from tests.support.app_window import close_window, open_window, settle  # noqa: E402

CONTROLS = (QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit, QListWidget, QPlainTextEdit, QSlider, QTabBar)
CHAT_TEXT_HEIGHT = 250  # the least height of the chat's text area at 800×600 (issue 24, point 23)
SIZES = ((800, 600), (1500, 900))


def resized(qtbot, window, width: int, height: int) -> None:
    window.resize(width, height)
    settle(window)
    assert (window.width(), window.height()) == (width, height)


def cut_controls(window) -> list[str]:
    """The Sampling dock's controls on the tab shown that are not whole within its width."""
    scroll = window.controls.scroll if not window.panel.compare_on() else window.panel.stack.currentWidget().scroll
    viewport = scroll.viewport()
    cut = []
    for widget in window.panel.findChildren(QWidget):
        if not isinstance(widget, CONTROLS) or not widget.isVisibleTo(window.panel):
            continue
        if isinstance(widget.parentWidget(), (QTabBar, QAbstractSpinBox, QComboBox)):
            continue  # a tab bar's scroll arrows, a spin box's own line edit: parts of a control
        if not scroll.isAncestorOf(widget) and not window.panel.isAncestorOf(widget):
            continue
        inside = scroll.isAncestorOf(widget)
        origin = widget.mapTo(viewport if inside else window.panel, QPoint(0, 0))
        right = origin.x() + widget.width()
        limit = viewport.width() if inside else window.panel.width()
        least = widget.minimumWidth() or widget.minimumSizeHint().width()  # its own, else its style's
        if isinstance(widget, (QListWidget, QPlainTextEdit)):
            least = 0  # a scroll area scrolls its text: whole within the dock is enough
        if origin.x() < 0 or right > limit or widget.width() < least:
            name = getattr(widget, "text", lambda: "")()
            cut.append(f"{type(widget).__name__} {name!r}: {origin.x()}+{widget.width()} of {limit}, least {least}")
    return cut


def test_sampling_dock_and_chat_at_800x600(qtbot, profile, tiny_folder):
    """At 800×600 the Sampling dock scrolled sideways (Delete and the preset box cut off)
    and the chat's text area was about 150 px tall."""
    window = open_window(qtbot, profile, str(tiny_folder))
    for width, height in (*SIZES, SIZES[0]):
        resized(qtbot, window, width, height)
        for compare in (False, True):
            window.panel.set_compare(compare, 3)
            settle(window)
            scroll = window.panel.stack.currentWidget().scroll
            window.grab().save(f"/tmp/small-window-{width}-{compare}.png")
            assert not scroll.horizontalScrollBar().isVisible(), (width, compare, window.controls_dock.width())
            assert cut_controls(window) == [], (width, compare)
        window.panel.set_compare(False)
        settle(window)
        assert window.chat.height() >= CHAT_TEXT_HEIGHT, (width, window.chat.height(), window.timeline_dock.height())
        assert window.timeline.height() >= window.timeline.minimumHeight() > 0
    close_window(window)


def test_the_colour_switch_and_its_legend_are_whole(qtbot, profile, tiny_folder):
    """ "Colour tokens by probabil…" was clipped and its legend not shown at 800×600."""
    window = open_window(qtbot, profile, str(tiny_folder))
    window.color_toggle.setChecked(True)
    legend = window.central.legend
    for width, height in SIZES:
        resized(qtbot, window, width, height)
        window.central.grab().save(f"/tmp/legend-{width}.png")
        switch = window.color_toggle
        assert switch.width() >= switch.sizeHint().width(), (width, switch.text(), switch.width())
        assert legend.isVisible() and legend.width() >= legend.sizeHint().width(), (width, legend.width())
        assert all(f"{p}%" in legend.text() for p in (0, 25, 50, 75, 100))
        for item in (switch, legend):  # inside the chat panel
            left = item.mapTo(window.central, QPoint(0, 0)).x()
            assert left >= 0 and left + item.width() <= window.central.width(), (width, item)
    close_window(window)


def test_a_scored_texts_third_row_gets_room(qtbot, profile, tiny_folder):
    """Score mode's three timeline rows were squashed, their axis titles cut off: the
    timeline grows by a row when the surprisal row comes, and gives it back after."""
    from PySide6.QtGui import QFontMetrics

    from tests.support.app_window import TIMEOUT

    window = open_window(qtbot, profile, str(tiny_folder))
    resized(qtbot, window, 1500, 900)
    before = window.timeline_dock.height()
    scoring = window.score_controller()
    assert scoring.score_text("The hat in the tin is the hat of the man in the hat. " * 3)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    settle(window)
    assert scoring.surprisal_plot.isVisible()
    window.grab().save("/tmp/score-rows.png")
    line = QFontMetrics(window.timeline.font()).height()
    plots = [window.timeline.prob_plot, window.timeline.entropy_plot, scoring.surprisal_plot]
    for plot in plots:
        assert plot.vb.height() >= 3 * line, (plot.getAxis("left").labelText, plot.vb.height())
        axis = plot.getAxis("left")
        title = axis.label.mapRectToScene(axis.label.boundingRect())
        frame = axis.mapRectToScene(QRectF(0, 0, axis.width(), axis.height()))
        assert frame.top() - 1 <= title.top() and title.bottom() <= frame.bottom() + 1, axis.labelText
    assert window.timeline_dock.height() > before
    window.model.new_chat()  # no scored text shown: the row goes, and the room it took
    window._redraw_if_dirty()
    settle(window)
    assert not scoring.surprisal_plot.isVisible()
    assert abs(window.timeline_dock.height() - before) <= 2, (window.timeline_dock.height(), before)
    close_window(window)
