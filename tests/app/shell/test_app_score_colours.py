"""A scored text is coloured by the distribution its numbers come from, the raw model
distribution its perplexity uses, and the legend says so (issue 24, point 4: with XTC on,
20 of 47 tokens read p = 0 and a 46 % token was shown red). The real default model, since
only a trained model gives likely tokens for XTC to remove; a reply in the same
conversation keeps p(final)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QTextCursor  # noqa: E402

from app.model.textfmt import prob  # noqa: E402
from app.views.theme import probability_color  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402

TEXT = "The capital of France is Paris. Paris is a city on the river Seine, famous for the Eiffel Tower."
XTC = SamplingParams(xtc_probability=1.0, xtc_threshold=0.1, top_logprobs=5)


def shade(window, ref) -> str:
    """The background colour the chat gives token ``ref``."""
    start, length = window.chat.writer.span_of(ref)
    cursor = QTextCursor(window.chat.document())
    cursor.setPosition(start + length)  # the format of the character before the cursor
    return cursor.charFormat().background().color().name()


@pytest.mark.slow
def test_a_scored_text_is_shaded_by_the_raw_distribution_and_the_legend_says_so(qtbot, profile):

    window = open_window(qtbot, profile, "default")
    window.controls.set_params(XTC)
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window._redraw_if_dirty()
    branch = window.model.last_assistant().branch
    stream, steps = ("branch", branch.id), branch.steps
    window.model.select(None)  # a selected token is drawn selected, not shaded
    window._redraw_if_dirty()
    removed = [i for i, s in enumerate(steps) if s.logprob == -math.inf and prob(s.raw_logprob) > 0.3]
    assert removed, "XTC removed no likely scored token"  # the 46 % token read as p = 0
    colors = window.chat.colors
    for i in removed:
        assert shade(window, (stream, i)) == probability_color(prob(steps[i].raw_logprob), colors)
        assert shade(window, (stream, i)) != probability_color(0.0, colors)
    by_raw = [probability_color(prob(s.raw_logprob), colors) for s in steps]
    assert [shade(window, (stream, i)) for i in range(len(steps))] == by_raw
    legend = window.central.color_toggle.text() + window.central.legend.text()
    # In the longest words that fit the chat's width: "p(raw) of the scored token", "p(raw)", …
    assert "p(raw)" in legend and "final" not in legend
    assert "raw model distribution" in window.central.legend.toolTip()

    # A reply in the same conversation is drawn: by what it was drawn from, and the legend names both.
    send(qtbot, window, "Tell me more.", SamplingParams(max_tokens=6, temperature=0.0, top_logprobs=5))
    window.model.select(None)
    window._redraw_if_dirty()
    reply = window.model.last_assistant().branch
    assert all(
        shade(window, (("branch", reply.id), i)) == probability_color(prob(s.logprob), colors)
        for i, s in enumerate(reply.steps)
    )
    legend = window.central.color_toggle.text() + window.central.legend.text()
    assert "raw" in legend and "final" in legend and "drawn" in window.central.legend.toolTip()
    close_window(window)
