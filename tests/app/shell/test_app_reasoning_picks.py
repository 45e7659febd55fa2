"""Issue 26 in the app, continued (tests/app/shell/test_app_reasoning.py's tiny thinking model and
helpers): a token picked in the answer goes on with the answer's settings, an end of the
thinking picked by hand is not the budget's, and the Answer tab keeps the reply's Max
tokens."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from engine.api.reasoning import ANSWER, THINKING  # noqa: E402
from tests.app.shell.test_app_compare import link_point  # noqa: E402
from tests.app.shell.test_app_reasoning import BUDGET, box_point, last_reply, thinking_params  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402


@pytest.fixture
def window(qtbot, profile, qwen_folder):
    """The app on the tiny thinking model (``qwen_folder``, ``tests/app/conftest.py``)."""
    window = open_window(qtbot, profile, str(qwen_folder))
    yield window
    close_window(window)


def test_a_token_picked_in_the_answer_goes_on_with_the_answers_settings(qtbot, window):
    """A pick continues the reply as a new request (the app holds it as steps), sent with
    the panel's settings: the thinking ended before the pick, so the answer's apply."""
    base = thinking_params(window)
    answer = SamplingParams(temperature=0.25, top_k=3, max_tokens=14, top_logprobs=4, logit_bias=base.logit_bias)
    send(qtbot, window, "what is 2+2?", base.with_changes(think_variant=answer))
    entry, steps = last_reply(window)
    at = BUDGET + 3
    assert steps[at].phase == ANSWER
    window.select_token((entry.stream, at))
    other = next(c.token_id for c in window.inspector.candidates if c.token_id != steps[at].token_id)
    window.pick_token(other)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    _, steps = last_reply(window)
    assert steps[at].forced and steps[at].token_id == other and len(steps) == 14
    assert [s.params for s in steps[at:]] == [answer.with_changes(seed=base.seed)] * (14 - at)


def test_an_end_of_thinking_picked_by_hand_is_not_said_to_be_the_budgets(qtbot, window):
    send(qtbot, window, "what is 2+2?", thinking_params(window))
    entry, _ = last_reply(window)
    window.select_token((entry.stream, 2))
    window.pick_token(window.model_info.reasoning.end[0])  # </think> picked at index 2, under the budget
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    _, steps = last_reply(window)
    assert steps[2].forced and [s.phase for s in steps[:4]] == [THINKING] * 3 + [ANSWER]
    header = link_point(window.chat, "think:", prefix=True)
    text = window.chat.document().findBlock(window.chat.cursorForPosition(header).position()).text()
    assert text.startswith("▸ Thinking · 3 tokens") and "budget" not in text


def test_the_answer_tab_keeps_the_replys_max_tokens(qtbot):
    """Max tokens limits the whole reply: on the Answer tab it is disabled and shows the
    Thinking tab's, typed there."""
    from app.views.sampling_panel import SamplingPanel

    panel = SamplingPanel()
    qtbot.addWidget(panel)
    panel.set_reasoning(thinks=True, has_switch=False)  # a reasoning model is loaded
    panel.show()
    assert panel.reasoning.answer_switch.isVisible()
    qtbot.mouseClick(
        panel.reasoning.answer_switch, Qt.MouseButton.LeftButton, pos=box_point(panel.reasoning.answer_switch)
    )
    field = panel.answer_controls.fields["max_tokens"]
    assert not field.isEnabled() and "whole reply" in field.toolTip()
    spin = panel.controls.fields["max_tokens"].spin
    spin.setFocus()
    spin.selectAll()
    qtbot.keyClicks(spin, "900")
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    assert panel.controls.current.max_tokens == 900 and field.value() == 900
