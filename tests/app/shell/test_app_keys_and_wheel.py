"""The keyboard and the mouse as a new user tries them (issue 24, points 9, 10 and 11): Tab
goes round the window and out of the message box, a double-click anywhere on a candidate's
row continues the reply from it, and the mouse wheel over the Sampling dock scrolls it
rather than changing a field the pointer happens to pass over. Real key, mouse and wheel
events go to the widget a person's would reach (``QApplication.focusWidget()``, or the
widget under the pointer)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QSettings, Qt, QTimer  # noqa: E402
from PySide6.QtGui import QContextMenuEvent  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from app.model.textfmt import visible  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402

NO_MODIFIER = Qt.KeyboardModifier.NoModifier


def press(qtbot, key, modifier=NO_MODIFIER) -> QWidget:
    """A key press to the widget that has the focus; returns the one that has it after."""
    target = QApplication.focusWidget()
    assert target is not None, "no widget has the keyboard focus"
    qtbot.keyClick(target, key, modifier)
    return QApplication.focusWidget()


def focus_cycle(qtbot, key, modifier=NO_MODIFIER, limit: int = 150) -> list[QWidget]:
    """Press ``key`` until the focus is back where it started: every widget it stopped on."""
    stops = [QApplication.focusWidget()]
    for _ in range(limit):
        now = press(qtbot, key, modifier)
        if now is stops[0]:
            return stops
        stops.append(now)
    tail = [type(w).__name__ for w in stops[-5:]]
    raise AssertionError(f"the focus never came back to {type(stops[0]).__name__}; last stops: {tail}")


def reply_window(qtbot, profile, tiny_folder):
    """A window with a short reply in it (links in the chat, rows in the inspector)."""
    window = open_window(qtbot, profile, str(tiny_folder))
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    window.controls.set_params(SamplingParams(max_tokens=6, top_logprobs=5, logit_bias=no_eos))
    window.send()
    qtbot.waitUntil(lambda: window.model.conversation is not None and not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    window.activateWindow()
    window.composer.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.composer)
    return window


# 9. Tab and Shift+Tab go round the window ----------------------------------------------------------


def test_tab_goes_round_the_window_and_out_of_the_message_box(qtbot, profile, tiny_folder):
    window = reply_window(qtbot, profile, tiny_folder)
    window.composer.setPlainText("a question")
    cycle = focus_cycle(qtbot, Qt.Key.Key_Tab)
    assert window.composer.toPlainText() == "a question"  # no tab character typed into it
    assert len(cycle) == len(set(cycle)), "a widget kept the focus for more than one Tab"
    assert cycle[0] is window.composer and cycle[1] is window.central.send_button
    order = [
        window.central.send_button,
        window.central.regen_button,
        window.panel.compare,
        window.controls.presets,
        window.controls.fields["temperature"].spin,
        window.controls.stop,
        window.inspector.chain_view,
        window.system_prompt,
        window.chat,
        window.color_toggle,
    ]
    missing = [type(w).__name__ for w in order if w not in cycle]
    assert not missing, missing
    assert [cycle.index(w) for w in order] == sorted(cycle.index(w) for w in order)
    # Shift+Tab goes the same way back.
    back = focus_cycle(qtbot, Qt.Key.Key_Backtab, Qt.KeyboardModifier.ShiftModifier)
    assert back == [cycle[0], *reversed(cycle[1:])]
    # Ctrl+Tab leaves the message box too (the usual way out of a text box that takes Tab).
    assert press(qtbot, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier) is window.central.send_button
    assert window.composer.toPlainText() == "a question"
    close_window(window)


# 10. A double-click on a candidate's name continues the reply ------------------------------------------


def test_double_click_on_a_candidates_name_branches(qtbot, profile, tiny_folder):
    window = reply_window(qtbot, profile, tiny_folder)
    (message,) = [m for m in window.thread_messages if m.role == "assistant"]
    stream = ("branch", message.branch.id)
    window.model.select((stream, 2))
    window._redraw_if_dirty()
    view = window.inspector.chain_view
    chosen = message.branch.steps[2].token_id
    row = next(r for r, c in enumerate(window.inspector.candidates) if c.token_id != chosen)
    picked = window.inspector.candidates[row].token_id
    header = view.verticalHeader()  # the candidates' names
    assert header.isVisible()
    point = QPoint(header.width() // 2, header.sectionViewportPosition(row) + header.sectionSize(row) // 2)
    # A right-click on the name offers what it offers on the row's numbers.
    offered: list[list[str]] = []

    def read_menu() -> None:
        menu = QApplication.activePopupWidget()
        offered.append([a.text() for a in menu.actions()])
        menu.close()

    QTimer.singleShot(0, read_menu)
    reason = QContextMenuEvent.Reason.Mouse
    QApplication.sendEvent(header.viewport(), QContextMenuEvent(reason, point, header.viewport().mapToGlobal(point)))
    name = window.inspector.candidates[row].text
    assert offered and offered[0][0] == f"Continue with “{visible(name)}”", offered
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=point)
    qtbot.mouseDClick(header.viewport(), Qt.MouseButton.LeftButton, pos=point)
    qtbot.waitUntil(lambda: len(window.thread_messages[-1].branches) == 2 and not window.busy(), timeout=TIMEOUT)
    new = window.thread_messages[-1].branch
    assert new.steps[2].token_id == picked and new.steps[2].forced
    close_window(window)


# 11. The wheel over the Sampling dock scrolls it -------------------------------------------------------


def wheel_over(widget: QWidget, delta: int) -> None:
    """A real wheel event (through the window system) with the pointer over ``widget``."""
    top = widget.window()
    point = widget.mapTo(top, widget.rect().center())
    QTest.wheelEvent(top.windowHandle(), point, QPoint(0, delta))
    QApplication.processEvents()


def test_the_wheel_scrolls_the_sampling_panel_and_changes_only_a_focused_field(qtbot, tmp_path):
    from app.views.sampling_panel import SamplingPanel

    panel = SamplingPanel(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(panel)
    panel.resize(340, 420)
    panel.show()
    qtbot.waitExposed(panel)
    controls = panel.controls
    controls.set_params(SamplingParams(temperature=0.7))
    bar = controls.scroll.verticalScrollBar()
    assert bar.maximum() > 0, "the panel must be taller than its dock for this test"
    field = controls.fields["temperature"]
    unfocused = [field.spin, field.slider, controls.presets, panel.count]
    panel.set_compare(True, 3)
    panel.compare.setFocus()  # the focus elsewhere in the panel
    for widget in unfocused:
        if controls.scroll.widget().isAncestorOf(widget):
            controls.scroll.ensureWidgetVisible(widget)
        QApplication.processEvents()
        before = (bar.value(), controls.current, panel.count.value(), controls.presets.currentText())
        down = bar.value() < bar.maximum()
        wheel_over(widget, -120 if down else 120)
        assert controls.current.temperature == 0.7, type(widget).__name__
        assert (controls.current, panel.count.value(), controls.presets.currentText()) == before[1:]
        if controls.scroll.widget().isAncestorOf(widget):
            assert bar.value() != before[0], f"the panel did not scroll over {type(widget).__name__}"
        assert not widget.hasFocus()
    # A field with the focus (clicked, or reached by Tab) takes the wheel as before.
    controls.scroll.ensureWidgetVisible(field.spin)
    QApplication.processEvents()
    field.spin.setFocus()
    wheel_over(field.spin, -120)
    assert controls.current.temperature == pytest.approx(0.69)
