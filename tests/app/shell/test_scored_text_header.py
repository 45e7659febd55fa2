"""A scored text's turn showed "seed N · reuse" above it: the text was given, not drawn, so
no seed wrote it and reusing one reproduces nothing. A reply keeps its seed header."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from engine.api.params import SamplingParams  # noqa: E402
from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402


def test_a_scored_text_has_no_seed_header_a_reply_has(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "hello", SamplingParams(max_tokens=4, temperature=0.7, seed=1234))
    assert "seed 1234" in window.chat.toPlainText() and "reuse" in window.chat.toPlainText()
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    scored = [e for e in window.entries if e.role == "assistant"][-1]
    assert scored.steps and scored.steps[0].rank is not None and scored.seed is None
    shown = window.chat.toPlainText()
    assert "seed" not in shown and "reuse" not in shown, shown[:300]
    close_window(window)
