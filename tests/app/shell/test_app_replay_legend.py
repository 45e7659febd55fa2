"""Replay explains its marks where they are drawn (a legend over the timeline) and says what
it found when it finishes (the status bar and the legend): how many tokens keep the same most
likely token, how many differ, how many the settings would remove (the tiny model, offscreen)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, token_point  # noqa: E402


def chat_action(window, text: str):
    chat_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Chat")
    return next(a for a in chat_menu.actions() if a.text() == text)


def test_replay_has_a_legend_and_says_what_it_found(qtbot, profile, tiny_folder):
    from app.shell.score_actions import REPLAY_TEXT

    window = open_window(qtbot, profile, str(tiny_folder))
    sampled = SamplingParams(max_tokens=24, temperature=1.0, seed=7, top_logprobs=5)
    send(qtbot, window, "the hat", sampled)
    first = window.model.last_assistant().branch
    send(qtbot, window, "and again", sampled)
    second = window.model.last_assistant().branch
    ref = (("branch", first.id), 2)
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=token_point(window, ref))
    assert window.model.selection == ref
    scoring = window.score_controller()
    legend = scoring.overlay.legend
    assert not legend.isVisibleTo(window.timeline)  # no replay, no marks to explain

    # Greedy with top-k 3: the replay removes some of the sampled reply's tokens.
    window.controls.set_params(SamplingParams(max_tokens=8, temperature=0.0, top_k=3, top_logprobs=5))
    chat_action(window, REPLAY_TEXT).trigger()
    qtbot.waitUntil(lambda: scoring.result is not None, timeout=TIMEOUT)
    window._redraw_if_dirty()
    result = scoring.result
    total, differs, removed = len(result.steps), len(result.differs), len(result.removed)
    assert total == len(first.steps) and removed > 0
    said = window.statusBar().currentMessage()
    assert said.startswith("Replay finished"), said
    assert f"same most likely token at {total - differs} of {total} tokens" in said
    assert f"differs at {differs}" in said and f"removed {removed}" in said
    assert f"first change at token {result.first_change}" in said

    # The legend, over the timeline that draws the marks: each mark named; the finding kept.
    assert legend.isVisibleTo(window.timeline)
    text = legend.text()
    for mark in ("red dashes", "✕", "▲"):
        assert mark in text, text
    assert said in legend.toolTip()
    top = window.timeline.mapFromGlobal(legend.mapToGlobal(legend.rect().topLeft())).y()
    assert top < window.timeline.view.geometry().top()  # above the plots it explains

    # Another reply selected: the overlay and its legend go.
    window._redraw_if_dirty()
    ref = (("branch", second.id), 1)
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=token_point(window, ref))
    assert scoring.result is None and not legend.isVisibleTo(window.timeline)
    close_window(window)
