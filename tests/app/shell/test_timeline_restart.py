"""The timeline's height survives a restart with a reply in the conversation (issue 51, #5):
fresh home, Enter, quit, start again — the timeline came back ~70 px tall (180 px at quit),
only "P" and "H" left as axis labels. A home without a reply restored correctly. Tested
through a real restart: the window closed (its settings saved as on quit) and a new one
opened on the same profile."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402


def test_the_timeline_keeps_its_height_through_a_restart_with_a_reply(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.controls.set_params(SamplingParams(max_tokens=12, temperature=0.0))
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)  # the question already in the box
    qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    before = window.timeline_dock.height()
    assert before >= window.timeline.rows.roomy_height() - 4, before  # the default, roomy
    close_window(window)

    again = open_window(qtbot, profile, str(tiny_folder))
    qtbot.waitUntil(lambda: again.model.conversation is not None, timeout=TIMEOUT)
    again._redraw_if_dirty()
    qtbot.waitUntil(lambda: again.timeline.series.n > 0, timeout=TIMEOUT)
    after = again.timeline_dock.height()
    again.grab().save("/tmp/ls/timeline_after_restart.png")
    assert abs(after - before) <= 4, (before, after)
    # Roomy: its rows and the titled token axis (at ~70 px only "P" and "H" were left).
    assert after >= again.timeline.rows.roomy_height() - 4, (after, again.timeline.rows.roomy_height())
    close_window(again)


def test_a_start_with_a_reply_resizes_no_dock_before_the_window_is_shown(qtbot, profile, tiny_folder, monkeypatch):
    """What the restart above lost its height to, where the platform lays a window out only
    once it is shown (X11): opening the last conversation before that added and hid timeline
    rows, and each resized the timeline dock from its not-yet-laid-out height, replacing the
    restored one. Every dock resize while the new window is hidden is recorded here."""
    from app.shell.window import MainWindow

    window = open_window(qtbot, profile, str(tiny_folder))
    window.controls.set_params(SamplingParams(max_tokens=6, temperature=0.0))
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
    close_window(window)

    hidden: list[list[int]] = []
    resize_docks = MainWindow.resizeDocks

    def recording(self, docks, sizes, orientation):
        if not self.isVisible() and self.settings.value("window_state") is not None:
            hidden.append(list(sizes))
        return resize_docks(self, docks, sizes, orientation)

    monkeypatch.setattr(MainWindow, "resizeDocks", recording)
    db, settings = profile
    again = MainWindow(db_path=db, settings=settings, model=str(tiny_folder))
    qtbot.addWidget(again)
    assert again.model.conversation is not None  # the last conversation, with its reply
    assert hidden == []  # the restored layout stands until the window is laid out
    again.show()
    qtbot.waitUntil(lambda: again.model_info is not None, timeout=TIMEOUT)
    close_window(again)
