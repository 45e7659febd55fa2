"""A scored text replayed under the settings it was scored with, XTC probability 1: the
replay's curve is at 0 wherever XTC removes the text's token, and the status bar said
"removed 0 (no change)" with no ✕ (issue 51, #6). Tokens removed under both settings are
still no change, but they are now counted and marked apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from engine.api.params import SamplingParams  # noqa: E402
from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402

XTC_ALWAYS = SamplingParams(temperature=1.0, seed=7, xtc_probability=1.0, xtc_threshold=0.002, top_logprobs=5)


def test_a_replay_says_and_marks_the_tokens_both_settings_remove(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.controls.set_params(XTC_ALWAYS)
    scoring = window.score_controller()
    assert scoring.score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    branch = window.model.last_assistant().branch
    removed_in_scoring = [s.index for s in branch.steps if s.logprobs[-1] == -math.inf]
    assert removed_in_scoring, "XTC at 0.002 should remove some of the tiny model's tokens"

    window.select_token((("branch", branch.id), 3))
    assert scoring.replay_selected()  # the panel still holds the settings it was scored with
    qtbot.waitUntil(lambda: scoring.result is not None, timeout=TIMEOUT)
    result = scoring.result
    at_zero = [s.index for s, p in zip(result.steps, result.chosen_prob, strict=True) if p == 0]
    assert at_zero == removed_in_scoring  # the curve at 0 there
    assert result.removed == [] and result.first_change is None  # still no change
    assert result.removed_too == removed_in_scoring

    said = window.statusBar().currentMessage()
    assert f"removed 0, and {len(removed_in_scoring)} removed under the reply's own settings too" in said, said
    assert said in scoring.overlay.legend.toolTip()
    x, y = scoring.overlay.removed_too.getData()
    np.testing.assert_array_equal(x, removed_in_scoring)  # a ✕ at each, at 0
    assert not np.any(y)
    window._redraw_if_dirty()
    window.timeline.grab().save("/tmp/ls/replay_removed_too.png")
    close_window(window)
