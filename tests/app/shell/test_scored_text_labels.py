"""A scored text's timeline and inspector say what its numbers are. The top row plotted
p(final) under the panel's chain (most tokens at 0 after XTC, with red rings) while the
colours used p(raw), and the inspector called every token "removed · picked by hand"."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from app.model.textfmt import prob  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402

TOP_K = SamplingParams(temperature=1.0, seed=3, top_k=2, top_logprobs=5)  # removes most given tokens


def test_a_scored_texts_rows_and_title_are_raw_and_say_given(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.controls.set_params(TOP_K)
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    branch = window.model.last_assistant().branch
    steps = branch.steps
    removed = [i for i, s in enumerate(steps) if s.logprob == -math.inf]
    assert removed, "top-k removed none of the text's tokens"

    window.select_token((("branch", branch.id), removed[0]))
    window._redraw_if_dirty()
    timeline = window.timeline
    np.testing.assert_allclose(timeline.series.p, [prob(s.raw_logprob) for s in steps])
    assert timeline.prob_plot.getAxis("left").labelText == "p(raw)"
    title = window.inspector.title.text()
    assert "scored text: given, not drawn" in title and "picked by hand" not in title
    assert "given, not drawn" in window.inspector.title.toolTip()
    from app.views.chat_view import tooltip_for

    hover = tooltip_for(steps[removed[0]])
    assert "given, not drawn" in hover and "picked by hand" not in hover
    close_window(window)
