"""Replaying a scored text under the settings it was scored with changes nothing. It read
"differs at 20 of 40, removed 18, first change at token 0" with XTC 0.5 and mirostat (seed
3): the replay rendered the text as a chat after its label turn, where scoring had read it
with its first token as the context, and counted tokens the original chain removed too.
Checked against the engine's own scoring of the same text."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("pytestqt")

from engine.api.params import DEFAULT_SAMPLERS, SamplingParams  # noqa: E402
from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402

XTC_MIROSTAT = SamplingParams(
    temperature=1.0,
    seed=3,
    xtc_probability=0.5,
    xtc_threshold=0.01,
    samplers=(*DEFAULT_SAMPLERS, "mirostat_v2"),
    mirostat_tau=8.0,
    top_logprobs=5,
)


def test_a_scored_text_replayed_under_its_own_settings_changes_nothing(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    window.controls.set_params(XTC_MIROSTAT)
    scoring = window.score_controller()
    assert scoring.score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    branch = window.model.last_assistant().branch
    steps = branch.steps
    removed_in_scoring = [s.index for s in steps if s.logprobs[-1] == -math.inf]
    assert removed_in_scoring, "the settings should remove some of the text's tokens"
    assert "xtc" in steps[0].chain and "mirostat_v2" in steps[0].chain

    window.select_token((("branch", branch.id), 3))
    assert scoring.replay_selected()
    qtbot.waitUntil(lambda: scoring.result is not None, timeout=TIMEOUT)
    result = scoring.result
    assert len(result.chosen_prob) == len(steps)
    assert result.first_change is None and result.removed == [] and result.differs == []
    # Every stage's numbers are the scoring's own, position by position.
    for old, new in zip(steps, result.steps, strict=True):
        assert new.token_id == old.token_id and new.chain == old.chain
        assert new.logprobs == pytest.approx(old.logprobs, abs=1e-5)

    # Other settings still show what they change: top-k 1 removes every token of the text
    # that is not the most likely, where the scoring kept it.
    window.controls.set_params(SamplingParams(top_k=1, top_logprobs=5))
    assert scoring.replay_selected()
    qtbot.waitUntil(lambda: scoring.result is not None and scoring.result.params.top_k == 1, timeout=TIMEOUT)
    kept_before = {s.index for s in steps if s.logprobs[-1] != -math.inf and s.rank != 1}
    assert set(scoring.result.removed) == kept_before
    assert scoring.result.first_change is not None  # XTC had removed the most likely somewhere
    close_window(window)
