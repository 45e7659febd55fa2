"""Issue 26 in the app, on a tiny Qwen3-style model through the real worker and engine: the
thinking collapsed above the answer and opened by a click on its header, its tokens
inspectable, copied and exported marked as thinking, kept over a restart.

The model is tests/support/tiny_thinking.py's: the Qwen3-style one with the template of Qwen3's
thinking models (the generation prompt opens ``<think>``; ``enable_thinking=False`` still
closes it): random weights never write ``</think>`` themselves, so the budget ends it."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from engine.api.reasoning import ANSWER, THINKING  # noqa: E402
from tests.app.shell.test_app_compare import link_point  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, settle, token_point  # noqa: E402

BUDGET = 5


@pytest.fixture
def window(qtbot, profile, qwen_folder):
    window = open_window(qtbot, profile, str(qwen_folder))
    yield window
    close_window(window)


def thinking_params(window, **changes) -> SamplingParams:
    """Sampled, with the end of text and ``</think>`` banned: the budget ends the thinking."""
    markers = window.model_info.reasoning
    banned = {t: -100.0 for t in (*window.model_info.eos_token_ids, *markers.end, *markers.start)}
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=14, top_logprobs=4, logit_bias=banned)
    return params.with_changes(**{"thinking_budget": BUDGET, **changes})


def box_point(box) -> QPoint:
    """A point on a check box's box (its centre may lie past its words, where a click misses)."""
    return QPoint(8, box.height() // 2)


def last_reply(window):
    window._redraw_if_dirty()
    entry = [e for e in window.entries if e.role == "assistant"][-1]
    return entry, entry.steps


def thinking_blocks_visible(window) -> list[bool]:
    """Whether each block holding a thinking token is shown."""
    doc = window.chat.document()
    entry, steps = last_reply(window)
    shown = []
    for i, step in enumerate(steps):
        if step.phase == THINKING:
            position, _ = window.chat.writer.span_of((entry.stream, i))
            shown.append(doc.findBlock(position).isVisible())
    return shown


def test_thinking_is_collapsed_above_the_answer_and_opens_with_a_click(qtbot, window):
    send(qtbot, window, "what is 2+2?", thinking_params(window))
    entry, steps = last_reply(window)
    phases = [s.phase for s in steps]
    assert phases == [THINKING] * (BUDGET + 1) + [ANSWER] * (14 - BUDGET - 1)
    assert steps[BUDGET].forced and steps[BUDGET].text == "</think>"
    # Collapsed once the answer started: the header says what it holds, the tokens are hidden.
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text.startswith("▸ Thinking · 6 tokens ·") and "ended by the budget" in text
    assert thinking_blocks_visible(window) and not any(thinking_blocks_visible(window))
    answer_y = token_point(window, (entry.stream, BUDGET + 1)).y()
    # A real click on the header opens it: the thinking is drawn above the answer.
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=header)
    assert all(thinking_blocks_visible(window))
    assert token_point(window, (entry.stream, 0)).y() < token_point(window, (entry.stream, BUDGET + 1)).y()
    assert token_point(window, (entry.stream, BUDGET + 1)).y() > answer_y
    header = link_point(window.chat, "think:", prefix=True)
    assert window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()[0] == "▾"
    # A thinking token is a token like any other: clicked, the inspector shows it.
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=token_point(window, (entry.stream, 2)))
    assert window.model.selection == (entry.stream, 2)
    window._redraw_if_dirty()
    assert "thinking" in window.inspector.title.text()
    assert window.timeline.selection_line.isVisible() and window.timeline.selection_line.value() == 2
    # Clicked again, the header closes it.
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=link_point(window.chat, "think:", True))
    assert not any(thinking_blocks_visible(window))


def test_copy_marks_the_thinking(qtbot, window):
    send(qtbot, window, "what is 2+2?", thinking_params(window))
    entry, steps = last_reply(window)
    thinking = "".join(s.text for s in steps[: BUDGET + 1]).strip("\n").removesuffix("</think>").strip("\n")
    answer = "".join(s.text for s in steps[BUDGET + 1 :]).lstrip("\n")
    assert thinking and answer
    menu = window.chat.token_menu((entry.stream, 2))
    assert menu.actions()[0].text().endswith("(thinking)")
    next(a for a in menu.actions() if a.text() == "Copy reply text").trigger()
    assert QApplication.clipboard().text() == f"<think>\n{thinking}\n</think>\n\n{answer}"
    # Ctrl+C over a selection of the whole reply (the thinking opened): the same marks.
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=link_point(window.chat, "think:", True))
    window.chat.selectAll()
    window.chat.setFocus()
    qtbot.keyClick(window.chat, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    selected = QApplication.clipboard().text()
    assert selected.endswith(f"<think>\n{thinking}\n</think>\n\n{answer}")


def test_answer_settings_and_budget_from_the_panel_apply_from_the_right_token(qtbot, window):
    panel, row = window.panel, window.panel.reasoning
    base = thinking_params(window, thinking_budget=None)
    window.controls.set_params(base)  # the thinking's settings; the rest is set in the panel
    # The budget, typed into its field.
    row.budget.setFocus()
    row.budget.selectAll()
    qtbot.keyClicks(row.budget, str(BUDGET))
    qtbot.keyClick(row.budget, Qt.Key.Key_Tab)
    assert window.controls.current.thinking_budget == BUDGET
    # The switch and the Answer tab, clicked: a second set of the same fields.
    qtbot.mouseClick(row.answer_switch, Qt.MouseButton.LeftButton, pos=box_point(row.answer_switch))
    assert row.phase_tabs.isVisible()
    qtbot.mouseClick(row.phase_tabs, Qt.MouseButton.LeftButton, pos=row.phase_tabs.tabRect(1).center())
    assert panel.stack.currentWidget() is panel.answer_controls
    answer = SamplingParams(temperature=0.2, top_k=3, max_tokens=14, top_logprobs=4, logit_bias=base.logit_bias)
    panel.answer_controls.set_params(answer)
    # Validated as the first: a bad value there refuses the send and says where.
    panel.answer_controls.bias.setText("12:abc")
    panel.answer_controls.bias.editingFinished.emit()
    assert "answer" in panel.send_problem()
    panel.answer_controls.set_params(answer)
    assert window.controls.current.think_variant == answer
    window.composer.setPlainText("what is 2+2?")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    entry, steps = last_reply(window)
    first = BUDGET + 1
    assert [s.phase for s in steps[:first]] == [THINKING] * first and steps[BUDGET].forced
    assert all(s.params.temperature == 1.0 and s.params.think_variant == answer for s in steps[:first])
    assert all(s.params == answer.with_changes(seed=base.seed) for s in steps[first:])
    assert window.statusBar().currentMessage() == f"The answer's settings in force from token {first}."
    # The timeline: the change marker and the "answer" line before the first answer token.
    timeline = window.timeline
    assert [line.value() for line in timeline.change_lines] == [first - 0.5]
    assert timeline.change_lines[0].label.format.startswith("answer settings: ")
    assert timeline.phase.answer_line.isVisible() and timeline.phase.answer_line.value() == first - 0.5
    assert timeline.phase.spans[0].getRegion() == (-0.5, first - 0.5)
    xs, _ = timeline.phase.first_points[0].getData()
    assert list(xs) == list(range(first, first + 8))
    # The inspector: the forced end of the thinking says so.
    window.select_token((entry.stream, BUDGET))
    window._redraw_if_dirty()
    assert "end of thinking forced by the budget" in window.inspector.title.text()
    from app.views.chat_view import tooltip_for

    tip = tooltip_for(steps[BUDGET])
    assert "end of thinking forced by the budget" in tip and "picked by hand" not in tip


def test_the_thinking_switch_shows_for_a_template_that_has_it(qtbot, window, profile, tiny_folder):
    toggle = window.panel.reasoning.think_toggle
    assert window.model_info.thinking_switch and toggle.isVisible() and toggle.isChecked()
    assert window.panel.reasoning.answer_switch.isVisible() and window.panel.reasoning.budget.isVisible()
    qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton, pos=box_point(toggle))
    assert not toggle.isChecked()
    send(qtbot, window, "what is 2+2?", thinking_params(window))
    _, steps = last_reply(window)
    assert [s.phase for s in steps] == [ANSWER] * 14  # the template closed the thinking itself
    assert window.chat.writer.thinking_header_span(last_reply(window)[0].stream) is None
    # A model whose template has no switch: no toggle.
    window.loader.load(str(tiny_folder))
    qtbot.waitUntil(lambda: window.model_info.name == "tiny-llama", timeout=TIMEOUT)
    assert not window.model_info.thinking_switch and not toggle.isVisible()
    # Nor any other part of the row: the model has no reasoning markers (it sat at the top of
    # the Sampling dock), and nothing of it is sent.
    assert window.model_info.reasoning is None and not window.panel.reasoning.isVisible()
    current = window.panel.controls.current
    assert current.thinking_budget is None and current.think_variant is None


def test_export_marks_the_phase_and_a_restart_keeps_it(qtbot, profile, qwen_folder, tmp_path):
    import csv
    import json

    window = open_window(qtbot, profile, str(qwen_folder))
    send(qtbot, window, "what is 2+2?", thinking_params(window))
    entry, steps = last_reply(window)
    phases = [s.phase for s in steps]
    assert phases == [THINKING] * (BUDGET + 1) + [ANSWER] * (14 - BUDGET - 1)
    window.select_token((entry.stream, 3))
    out = window.score_controller().export("reply", str(tmp_path / "reply.jsonl"))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["phase"] for r in records if r["type"] == "token"] == phases
    out = window.score_controller().export("reply", str(tmp_path / "reply.csv"))
    with open(out, newline="") as f:
        by_index = {int(row["index"]): row["phase"] for row in csv.DictReader(f)}
    assert [by_index[i] for i in range(len(steps))] == phases
    close_window(window)

    window = open_window(qtbot, profile, str(qwen_folder))
    entry, steps = last_reply(window)
    assert [s.phase for s in steps] == phases
    # Read back, the thinking is drawn collapsed above the answer, without a time.
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text == "▸ Thinking · 6 tokens · ended by the budget"
    assert not any(thinking_blocks_visible(window))
    close_window(window)


def test_the_reasoning_row_is_whole_at_800x600(qtbot, window):
    from tests.app.shell.test_app_small_window import CHAT_TEXT_HEIGHT, resized

    resized(qtbot, window, 800, 600)
    row, panel = window.panel.reasoning, window.panel
    qtbot.mouseClick(row.answer_switch, Qt.MouseButton.LeftButton, pos=box_point(row.answer_switch))
    qtbot.mouseClick(row.phase_tabs, Qt.MouseButton.LeftButton, pos=row.phase_tabs.tabRect(1).center())
    settle(window)
    window.grab().save("/tmp/reasoning-800x600.png")
    assert panel.stack.currentWidget() is panel.answer_controls
    # The Answer tab starts as a copy of the thinking's settings.
    assert panel.answer_controls.current == window.controls.current.with_changes(think_variant=None)
    assert not panel.answer_controls.scroll.horizontalScrollBar().isVisible()
    for widget in (row.answer_switch, row.budget, row.think_toggle, row.phase_tabs):
        left = widget.mapTo(panel, QPoint(0, 0)).x()
        assert widget.isVisible() and left >= 0 and left + widget.width() <= panel.width(), widget
        assert widget.width() >= widget.minimumSizeHint().width(), widget
    assert window.chat.height() >= CHAT_TEXT_HEIGHT


def test_a_server_takes_neither_the_answers_settings_nor_the_budget(qtbot):
    from app.views.sampling_panel import SamplingPanel

    panel = SamplingPanel()
    qtbot.addWidget(panel)
    assert panel.reasoning.isHidden()  # no model yet: nothing of it applies
    panel.set_reasoning(thinks=True, has_switch=False)  # a local reasoning model
    assert not panel.reasoning.isHidden() and not panel.reasoning.budget.isHidden()
    panel.reasoning.budget.setValue(BUDGET)
    panel.reasoning.answer_switch.setChecked(True)
    assert panel.controls.current.thinking_budget == BUDGET and panel.controls.current.think_variant is not None
    panel.set_server("vllm")
    row = panel.reasoning
    assert not row.answer_switch.isEnabled() and not row.budget.isEnabled()
    assert "local model" in row.budget.toolTip()
    current = panel.controls.current
    assert current.thinking_budget is None and current.think_variant is None and panel.send_problem() == ""
    panel.set_server("")
    assert panel.controls.current.thinking_budget == BUDGET


def test_a_change_of_the_answers_settings_mid_answer_applies_to_the_answer(qtbot, window):
    """The engine replaces a running request's settings whole: once the answer started, a
    live change sends the answer's settings, not the thinking's back."""
    answer = SamplingParams(temperature=0.5, max_tokens=400, top_logprobs=4)
    params = thinking_params(window, max_tokens=400, think_variant=answer.with_changes(logit_bias={}))
    send(qtbot, window, "count", params, wait=False)

    def answering() -> bool:
        steps = [s for reply in window.model.replies.values() for s in reply.steps]
        return len(steps) > BUDGET + 4 and steps[-1].phase == ANSWER

    qtbot.waitUntil(answering, timeout=TIMEOUT)
    panel = window.panel
    panel.answer_controls.set_params(answer.with_changes(temperature=0.25))  # the Answer tab, changed
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    _, steps = last_reply(window)
    first = BUDGET + 1
    assert [s.params.temperature for s in steps[:first]] == [1.0] * first
    later = [s.params.temperature for s in steps[first:]]
    assert later[0] == 0.5 and later[-1] == 0.25 and set(later) == {0.5, 0.25}, later


def test_a_thinking_cut_off_by_the_token_limit_says_so(qtbot, window):
    send(qtbot, window, "what is 2+2?", thinking_params(window, max_tokens=4))
    entry, steps = last_reply(window)
    assert [s.phase for s in steps] == [THINKING] * 4
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text.startswith("▾ Thinking · 4 tokens") and text.endswith("cut off by the token limit")
    assert all(thinking_blocks_visible(window))  # nothing else to show: it stays open
    # Copied, it is not closed: no </think> the model never wrote.
    next(a for a in window.chat.token_menu((entry.stream, 1)).actions() if a.text() == "Copy reply text").trigger()
    thinking = "".join(s.text for s in steps).strip("\n")
    assert QApplication.clipboard().text() == f"<think>\n{thinking}\n"


@pytest.mark.slow
def test_the_default_model_has_no_thinking_toggle(qtbot, profile):
    window = open_window(qtbot, profile, "default")
    assert window.model_info.reasoning is None and not window.model_info.thinking_switch
    assert not window.panel.reasoning.think_toggle.isVisible()
    assert not window.panel.reasoning.isVisible() and not window.panel.reasoning.answer_switch.isVisible()
    close_window(window)


def test_a_servers_reasoning_content_is_drawn_as_thinking(qtbot, profile, tiny_folder, vllm_like):
    """A server that streams its thinking as ``reasoning_content`` (vLLM with a reasoning
    parser; tests/integration/test_reasoning_remote.py's stand-in): the same collapsed section, and the
    per-phase settings off, saying why."""
    from app.model.remote_jobs import RemoteSpec

    window = open_window(qtbot, profile, str(tiny_folder))
    window.connect_remote(RemoteSpec(f"http://127.0.0.1:{vllm_like.server_address[1]}", ""))
    qtbot.waitUntil(lambda: window.model_info.backend == "remote" or bool(window.last_error), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    row = window.panel.reasoning
    assert not row.answer_switch.isEnabled() and not row.budget.isEnabled()
    send(qtbot, window, "hi", SamplingParams(temperature=0.7, seed=1, max_tokens=20))
    entry, steps = last_reply(window)
    assert [s.phase for s in steps] == [THINKING] * 3 + [ANSWER] * 2
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text.startswith("▸ Thinking · 3 tokens")
    assert not any(thinking_blocks_visible(window))
    assert window.chat.token_menu((entry.stream, 0)) is not None
    next(a for a in window.chat.token_menu((entry.stream, 0)).actions() if a.text() == "Copy reply text").trigger()
    assert QApplication.clipboard().text() == "<think>\nLet me\n</think>\n\nHi!"
    close_window(window)


def test_a_thinking_the_reply_ended_in_says_it_never_closed(qtbot, window):
    eos = {t: 100.0 for t in window.model_info.eos_token_ids}  # the end of text at once, inside the thinking
    send(qtbot, window, "what is 2+2?", SamplingParams(max_tokens=6, top_logprobs=2, logit_bias=eos))
    _, steps = last_reply(window)
    assert steps and all(s.phase == THINKING for s in steps)
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text.startswith(f"▾ Thinking · {len(steps)} token") and text.endswith("never closed: the reply ended in it")


def test_the_thinking_is_open_while_it_is_written(qtbot, window):
    send(qtbot, window, "count", thinking_params(window, max_tokens=1000, thinking_budget=900), wait=False)
    qtbot.waitUntil(lambda: any(len(r.steps) > 3 for r in window.model.replies.values()), timeout=TIMEOUT)
    window._redraw_if_dirty()
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text.startswith("▾ Thinking ·") and text.endswith("thinking…")
    assert thinking_blocks_visible(window) and all(thinking_blocks_visible(window))
    window.stop()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text.endswith("stopped inside the thinking")
