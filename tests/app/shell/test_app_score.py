"""Score text, replay, exports and Open export in the app, on the tiny model (offscreen)."""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("pytestqt")

from app.model.chat import DEFAULT_SYSTEM  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402

TEXT = "The hat in the tin is the hat of the man in the hat. " * 6


def scored_branch(window):
    message = window.model.last_assistant()
    assert message is not None and message.branch is not None
    return message.branch


def test_score_text_flow(qtbot, profile, tiny_folder, tmp_path):
    from app.views.score_views import ScoreTextDialog

    window = open_window(qtbot, profile, str(tiny_folder))
    scoring = window.score_controller()
    # the dialog reads a .md file
    md = tmp_path / "t.md"
    md.write_text(TEXT)
    dialog = ScoreTextDialog(window)
    dialog.load(md)
    assert dialog.text.toPlainText() == TEXT
    assert scoring.score_text(dialog.text.toPlainText())
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    branch = scored_branch(window)
    assert branch.finish_reason == "scored"
    steps = branch.steps
    assert len(steps) > 100 and all(s.forced and s.rank is not None and s.rank >= 1 for s in steps)
    assert "perplexity" in scoring.perplexity_label.text()
    assert scoring.last_done.tokens == len(steps)
    assert window.color_toggle.isChecked()
    # every token clickable into the inspector; the timeline shows it
    window.select_token((("branch", branch.id), 5))
    window._redraw_if_dirty()
    assert window.model.selected_step() is steps[5]
    assert window.timeline.series.n == len(steps)
    x, bits = scoring.surprisal_curve.getData()  # surprisal (bits) under the probability and entropy rows
    assert scoring.surprisal_plot.isVisible() and len(x) == len(steps)
    assert bits[5] == pytest.approx(-steps[5].logprob_at("raw") / 0.6931471805599453)
    # export the scored text, open it again
    out = tmp_path / "scored.jsonl"
    assert scoring.export("scored", str(out)) == out
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs[0]["kind"] == "score" and recs[-1]["type"] == "score_done"
    assert sum(r["type"] == "token" for r in recs) == len(steps)
    assert all("rank" in r for r in recs if r["type"] == "token")
    # The text as given, its first (context) token included: the export dropped it, and the
    # copy's Compare models then read another perplexity.
    original_text = whole_text_of(window, branch)
    assert original_text is not None and TEXT.strip().startswith(original_text.strip()[:40])
    assert recs[1]["type"] == "score" and recs[1]["text"] == original_text and recs[1]["prompt"] is None
    assert len(original_text) > len(branch.text) and original_text.endswith(branch.text)
    conversation = scoring.open_export(str(out))
    assert conversation is not None and window.model.conversation.id == conversation
    reopened = scored_branch(window)
    assert [s.token_id for s in reopened.steps] == [s.token_id for s in steps]
    assert reopened.text == branch.text and whole_text_of(window, reopened) == original_text
    # Opening it shows its own (empty) system prompt; a new chat has the default again.
    assert window.system_prompt.text() == ""
    window.new_chat()
    assert window.system_prompt.text() == DEFAULT_SYSTEM and window.model.system_prompt == DEFAULT_SYSTEM
    # plots
    for name in ("t.png", "t.svg", "i.png", "i.svg"):
        scoring.export_plot("timeline" if name[0] == "t" else "inspector", str(tmp_path / name))
        assert (tmp_path / name).stat().st_size > 100
    close_window(window)


def whole_text_of(window, branch) -> str | None:
    """What Compare models and the logit lens rebuild a prompt-less scored text from."""
    from app.model.reply_checks import prompt_less_text

    message = next(m for m in window.model.thread if any(b.id == branch.id for b in m.branches))
    return prompt_less_text(window.model.reading, message, branch)


class HeldScoring:
    """An EngineSession whose scoring holds at its second chunk until the test lets go
    (``let_go``), so a cancel sent meanwhile lands mid-way whatever the machine's speed (the
    hold ends at TIMEOUT at most: a hang guard)."""

    let_go = threading.Event()

    def __new__(cls):
        from engine.api.events import PrefillProgress
        from engine.session.session import EngineSession

        class Held(EngineSession):
            def score_text(self, *args, **kwargs):
                chunks = 0
                for event in super().score_text(*args, **kwargs):
                    if isinstance(event, PrefillProgress):
                        chunks += 1
                        if chunks == 2:  # the first chunk's tokens are out
                            cls.let_go.wait(TIMEOUT / 1000)
                    yield event

        return Held(prefill_chunk=16)


def test_score_cancel(qtbot, profile, tiny_folder):
    """Esc / Stop mid-way: the tokens scored so far stay, as a cancelled branch."""
    from PySide6.QtCore import Qt

    HeldScoring.let_go.clear()
    window = open_window(qtbot, profile, str(tiny_folder), session_factory=HeldScoring)
    try:
        scoring = window.score_controller()
        assert scoring.score_text(TEXT)
        qtbot.waitUntil(lambda: any(len(r.steps) > 0 for r in window.model.replies.values()), timeout=TIMEOUT)
        assert window.status.progress.isVisible()  # prefill progress while it runs
        qtbot.keyClick(window.composer, Qt.Key.Key_Escape)  # the cancel is queued to the held engine
    finally:
        HeldScoring.let_go.set()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    cancelled = scored_branch(window)
    assert cancelled.finish_reason == "cancelled" and 0 < len(cancelled.steps) < 150
    assert scoring.perplexity_label.text() == ""
    close_window(window)


def test_replay_and_branch(qtbot, profile, tiny_folder):

    window = open_window(qtbot, profile, str(tiny_folder))
    sampled = SamplingParams(max_tokens=24, temperature=1.0, seed=7, repetition_penalty=1.2, top_logprobs=5)
    send(qtbot, window, "the hat", sampled)
    branch = scored_branch(window)
    window.select_token((("branch", branch.id), 0))
    scoring = window.score_controller()
    assert not scoring.surprisal_plot.isVisible()  # only for scored texts
    # its own settings: nothing changes
    assert scoring.replay_selected()
    qtbot.waitUntil(lambda: scoring.result is not None, timeout=TIMEOUT)
    assert scoring.result.first_change is None and len(scoring.result.chosen_prob) == len(branch.steps)
    # greedy: the timeline overlays where it differs; one click branches there
    window.controls.set_params(SamplingParams(max_tokens=8, temperature=0.0, top_logprobs=5))
    assert scoring.replay_selected()
    qtbot.waitUntil(lambda: scoring.result is not None, timeout=TIMEOUT)
    first = scoring.result.first_change
    assert first is not None
    assert len(scoring.overlay_prob.getData()[0]) == len(branch.steps)
    token = scoring.result.new_top[first]
    assert scoring.branch_at_first_change()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    message = window.model.last_assistant()
    assert len(message.branches) == 2
    new = message.branch.steps
    assert [s.token_id for s in new[:first]] == [s.token_id for s in branch.steps[:first]]
    assert new[first].token_id == token
    close_window(window)
