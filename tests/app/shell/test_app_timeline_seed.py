"""Issue 11, points 2, 9 (timeline) and 13 (chat): which settings made a token (the
timeline's change markers, every reply's seed and "reuse"), the timeline's axes and empty
state, the muted hint text in the dark theme, and copying plain text from the chat."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPalette, QTextCursor  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.model.timeline_series import MIN_TOKENS  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.app.shell.test_app_compare import link_point  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402
from tests.support.tiny_model import build_tokenizer  # noqa: E402

GLYPHS = "⟨⟩⏎␣⇥␍∅‹›"


@pytest.fixture
def window(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    yield window
    close_window(window)


def sampled(window, **changes) -> SamplingParams:
    """A sampled reply (temperature 1) that runs to max_tokens: the end of text is banned."""
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    return SamplingParams(temperature=1.0, max_tokens=8, top_logprobs=5, logit_bias=no_eos).with_changes(**changes)


def reply_steps(window):
    window._redraw_if_dirty()
    entry = [e for e in window.entries if e.role == "assistant"][-1]
    return entry, entry.steps


def pick(qtbot, window, ref, token_id: int, params: SamplingParams) -> None:
    """Continue the reply of ``ref`` from ``token_id`` (the inspector's double-click)."""
    window.model.select(ref)
    window.controls.set_params(params)
    window.pick_token(token_id)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)


# Point 2: which settings made this token ---------------------------------------------------


def test_random_seed_is_drawn_shown_reused_and_reproduces(qtbot, window):
    params = sampled(window)
    assert params.seed is None  # "random each reply"
    send(qtbot, window, "hello", params)
    entry, steps = reply_steps(window)
    seeds = {s.params.seed for s in steps}
    assert len(seeds) == 1 and None not in seeds
    (seed,) = seeds
    # The seed is chosen when the reply is sent (the reply's own parameters hold it) ...
    assert window.model.thread[-1].branch.params.seed == seed
    # ... and shown on the reply with a one-click "reuse".
    assert f"seed {seed}" in window.chat.toPlainText()
    window.controls.seed.setText("")
    reuse = link_point(window.chat, "seed:", prefix=True)
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=reuse)
    assert window.controls.seed.text() == str(seed)
    assert window.controls.current.seed == seed
    # The same seed and settings write the same reply again.
    window.regenerate()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    again, again_steps = reply_steps(window)
    assert (again.branch, again.branches) == (1, 2)
    assert [s.token_id for s in again_steps] == [s.token_id for s in steps]
    # "Random each reply" again: the next reply has a seed of its own.
    window.controls.seed.setText("")
    window.controls.seed.editingFinished.emit()
    window.regenerate()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    _, third = reply_steps(window)
    assert third[0].params.seed not in (None, seed)


def test_marker_tooltip_says_what_changed_and_a_seed_alone_makes_none(qtbot, window):
    send(qtbot, window, "hello", sampled(window, seed=11))
    entry, steps = reply_steps(window)
    # Continue from token 3 with only another seed: no marker.
    pick(qtbot, window, (entry.stream, 3), steps[3].token_id, sampled(window, seed=12))
    entry, steps = reply_steps(window)
    assert steps[3].params.seed == 12 and steps[2].params.seed == 11
    assert window.timeline.steps is steps
    assert window.timeline.change_lines == []
    # Continue from token 5 with another temperature, top_k and seed: a marker labelled with
    # the settings, whose tooltip says what changed, one line per field (the seed too).
    pick(qtbot, window, (entry.stream, 5), steps[5].token_id, sampled(window, seed=13, temperature=1.2, top_k=7))
    entry, steps = reply_steps(window)
    assert window.timeline.steps is steps
    (line,) = window.timeline.change_lines
    assert line.value() == 4.5 and line.label.toPlainText() == "temperature, top_k"
    tooltip = ["From token 5:", "temperature 1 → 1.2", "top_k 0 → 7", "seed 12 → 13"]
    assert line.toolTip().splitlines() == tooltip and line.label.toolTip() == line.toolTip()


# Point 9: the timeline ----------------------------------------------------------------------


def test_timeline_shows_a_hint_before_the_first_token(qtbot, window):
    timeline = window.timeline
    window._redraw_if_dirty()
    # Before the first message: a hint, not bare 0–1 axes.
    assert timeline.hint.isVisible() and not timeline.view.isVisible()
    assert "Send a message" in timeline.hint.text()
    send(qtbot, window, "hello", sampled(window, max_tokens=2))
    window._redraw_if_dirty()
    assert timeline.view.isVisible() and not timeline.hint.isVisible()
    # A new chat: the hint again.
    window.model.new_chat()
    window._redraw_if_dirty()
    assert timeline.hint.isVisible() and not timeline.view.isVisible()


def test_timeline_token_axis_is_whole_numbers_and_one_token_has_room(qtbot, window):
    timeline = window.timeline
    send(qtbot, window, "hello", sampled(window, max_tokens=1))
    window._redraw_if_dirty()
    # One token: a short axis from it (MIN_TOKENS wide), not fractions of a token around it.
    low, high = timeline.prob_plot.viewRange()[0]
    assert low == -0.5 and high == MIN_TOKENS - 0.5, (low, high)
    # Token indices are whole numbers: no tick between them, however far one zooms in, and
    # no "(x0.001)" scale on the axis.
    for plot in (timeline.prob_plot, timeline.entropy_plot):
        axis = plot.getAxis("bottom")
        for lo, hi in ((-0.5, 0.5), (-0.5, 3.5), (0, 40)):
            ticks = [v for _spacing, values in axis.tickValues(lo, hi, 400) for v in values]
            assert ticks and all(float(v).is_integer() for v in ticks), (lo, hi, ticks)
        assert axis.autoSIPrefixScale == 1


def test_muted_hint_text_stays_muted_in_the_dark_theme(qtbot, window):
    window.set_theme("dark")
    note = window.controls.live_note
    dark = QApplication.palette().color(QPalette.ColorRole.Window)
    qtbot.waitUntil(lambda: note.palette().color(QPalette.ColorRole.Window) == dark)  # Qt posts the change
    foreground = note.palette().color(note.foregroundRole())
    assert not note.isEnabled()  # the way the panel mutes its hints
    assert foreground.lightness() < 180, foreground.name()
    hint = window.timeline.hint
    assert hint.palette().color(hint.foregroundRole()).lightness() < 180
    # Drawn on the window's colour (grab() would leave a label's background white).
    image = QImage(note.size(), QImage.Format.Format_RGB32)
    image.fill(note.palette().color(QPalette.ColorRole.Window))
    note.render(image)
    brightest = max(image.pixelColor(x, y).lightness() for x in range(image.width()) for y in range(image.height()))
    assert brightest < 200, brightest


# Point 13: copying from the chat ------------------------------------------------------------


def test_copy_from_chat_gives_the_plain_text(qtbot, window):
    tokenizer = build_tokenizer()
    space, newline = tokenizer.token_to_id("Ġ"), tokenizer.token_to_id("Ċ")
    eos = window.model_info.eos_token_ids[0]
    send(qtbot, window, "hello", sampled(window, seed=3))
    entry, steps = reply_steps(window)
    # A reply with a space token, a newline token and the end of text (an empty token).
    pick(qtbot, window, (entry.stream, 0), space, sampled(window, seed=3))
    entry, steps = reply_steps(window)
    pick(qtbot, window, (entry.stream, 1), newline, sampled(window, seed=3))
    entry, steps = reply_steps(window)
    pick(qtbot, window, (entry.stream, 5), eos, sampled(window, seed=3, logit_bias={}))
    entry, steps = reply_steps(window)
    assert steps[0].text == " " and steps[1].text == "\n" and steps[-1].text == ""
    text = window.model.thread[-1].branch.text
    shown = window.chat.toPlainText()
    assert "⟨" in shown and "⏎" in shown and "␣" in shown  # drawn for the eye ...
    # ... never copied: a selection from the reply's first token to the end of the chat.
    start = window.chat.writer.span_of((entry.stream, 0))[0]
    cursor = window.chat.textCursor()
    cursor.setPosition(start)
    cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
    window.chat.setTextCursor(cursor)
    window.chat.setFocus()
    QGuiApplication.clipboard().clear()
    qtbot.keyClick(window.chat, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == text
    # The whole chat: the messages as text, without the links' arrows or token glyphs.
    window.chat.selectAll()
    window.chat.copy()
    copied = QGuiApplication.clipboard().text()
    assert text in copied and "hello" in copied
    assert not set(copied) & set(GLYPHS), copied
    html = QGuiApplication.clipboard().mimeData().html()
    assert not html or not set(html) & set("⟨⟩⏎␣")
