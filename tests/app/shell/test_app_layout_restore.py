"""The timeline's and the Sampling dock's layout (issue 35): the timeline comes back after a
restart as tall as it was, with its token axis titled; View → Reset layout gives every row a
readable height; a slider keeps a usable width at 1000×700."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QEvent, Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.shell.window import MainWindow  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, settle  # noqa: E402


def token_title(window) -> str:
    return window.timeline.rows.shown()[-1].getAxis("bottom").labelText


def test_the_timeline_comes_back_as_tall_as_it_was_with_its_title(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.resize(800, 700)
    settle(window)
    window.resizeDocks([window.timeline_dock], [180], Qt.Orientation.Vertical)
    settle(window)
    assert window.timeline_dock.height() == 180 and token_title(window) == "token"
    close_window(window)
    # A window manager maps a restored window at a size of its own first (here a short one),
    # then gives it its saved geometry.
    db, settings = profile
    window = MainWindow(db_path=db, settings=settings, model=str(tiny_folder))
    qtbot.addWidget(window)
    window.resize(800, 560)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    settle(window)
    window.resize(800, 700)
    settle(window)
    assert window.timeline_dock.height() == 180, window.timeline_dock.height()
    assert token_title(window) == "token"
    close_window(window)


def test_reset_layout_gives_every_timeline_row_a_readable_height(qtbot, profile, tiny_folder):
    from app.shell.layout import default_sizes
    from app.views.timeline_rows import READABLE_LINES
    from tests.app.shell.test_app_window import action_named, menu_named

    window = open_window(qtbot, profile, str(tiny_folder))
    window.resize(1400, 860)  # the default size
    send(qtbot, window, "Hi", SamplingParams(max_tokens=8, seed=1))
    settle(window)
    for row, plot in window.timeline.rows.plots:  # p, H and two rows more (the lens's, a surprise row)
        if row in (4, 5):
            plot.show()
    window.resizeDocks([window.timeline_dock], [120], Qt.Orientation.Vertical)
    action_named(menu_named(window, "View"), "Reset layout").trigger()
    for row, plot in window.timeline.rows.plots:  # shown by hand, Reset's refresh hid them: again
        if row in (4, 5):
            plot.show()
    default_sizes(window.docks)  # what Reset layout sizes the docks with, with the four rows shown
    # Laid out now (a wait would let the timeline's next refresh hide the two rows shown by hand).
    QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
    window.timeline.view.ci.layout.activate()
    shown = window.timeline.rows.shown()
    assert len(shown) == 4
    least = READABLE_LINES * window.timeline.rows.line()
    heights = [round(plot.vb.height()) for plot in shown]
    assert min(heights) >= least, (heights, least)
    assert window.chat.height() >= 250  # the chat keeps its room
    close_window(window)


def test_sliders_keep_a_usable_width_at_1000_by_700(qtbot, profile, tiny_folder):
    # Issue 35: at 1000×700 the mirostat τ slider collapsed to a square.
    window = open_window(qtbot, profile, str(tiny_folder))
    window.resize(1000, 700)
    settle(window)
    chain = window.controls.chain
    widths = {}
    for stage in ("mirostat_v2", "temperature", "dry"):
        chain.select_stage(stage)
        settle(window)
        for name, field in window.controls.fields.items():
            if field.isVisibleTo(window) and field.slider.isVisibleTo(window):
                widths[name] = field.slider.width()
    assert "mirostat_tau" in widths, widths
    line = window.fontMetrics().height()
    assert min(widths.values()) >= 4 * line, widths
    close_window(window)
