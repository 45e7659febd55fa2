"""File → Export offers only what the selection is, and writes the selected thing: an
ordinary reply is not a scored text, a scored text is exported with its own prompt, text and
summary (the tiny model, offscreen)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, token_point  # noqa: E402

FIRST = "The hat in the tin is the hat of the man in the hat."
SECOND = "A cat sat on the mat and the mat was flat and the cat was fat."


def export_items(window) -> dict[str, bool]:
    """File → Export opened as a person opens it: each item's text and whether it is enabled."""
    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    export = next(a.menu() for a in file_menu.actions() if a.text() == "Export")
    export.popup(window.mapToGlobal(QPoint(10, 10)))
    try:
        return {a.text(): a.isEnabled() for a in export.actions() if a.text()}
    finally:
        export.hide()


def click_token(qtbot, window, ref) -> None:
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=token_point(window, ref))
    window._redraw_if_dirty()
    assert window.model.selection == ref


def read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_offers_only_what_the_selection_is_and_writes_it(qtbot, profile, tiny_folder, tmp_path):

    window = open_window(qtbot, profile, str(tiny_folder))
    scoring = window.score_controller()

    # An ordinary chat: its reply and conversation, never a scored text or a compare run.
    send(qtbot, window, "hello there", SamplingParams(max_tokens=6, top_logprobs=3))
    reply = window.model.last_assistant().branch
    click_token(qtbot, window, (("branch", reply.id), 2))
    items = export_items(window)
    assert items["This reply…"] and items["This conversation (all branches)…"]
    assert not items["This scored text…"] and not items["This compare run…"]
    assert not items["This model comparison…"] and not items["This logit lens…"]
    assert scoring.export("scored", str(tmp_path / "not-scored.jsonl")) is None
    assert not (tmp_path / "not-scored.jsonl").exists()
    out = scoring.export("reply", str(tmp_path / "reply.jsonl"))
    recs = read(out)
    assert recs[0]["kind"] == "reply"
    assert [r["token_id"] for r in recs if r["type"] == "token"] == [s.token_id for s in reply.steps]

    # A text scored as the answer to a prompt: a scored text, not a reply; its own prompt.
    assert scoring.score_text(FIRST, prompt="Say the hat line.")
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    first = window.model.last_assistant().branch
    first_conversation = window.model.conversation.id
    click_token(qtbot, window, (("branch", first.id), 3))
    items = export_items(window)
    assert items["This scored text…"] and items["This conversation (all branches)…"]
    assert not items["This reply…"] and not items["This compare run…"]
    first_done = scoring.last_done

    # A second scored text (no prompt), then back to the first: the export is the first's.
    assert scoring.score_text(SECOND)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert scoring.last_done.tokens != first_done.tokens
    window.open_conversation(first_conversation)
    click_token(qtbot, window, (("branch", first.id), 3))
    out = scoring.export("scored", str(tmp_path / "scored.jsonl"))
    recs = read(out)
    assert recs[0]["kind"] == "score"
    (score,) = [r for r in recs if r["type"] == "score"]
    assert score["prompt"] == "Say the hat line." and score["text"] == FIRST
    assert [r["token_id"] for r in recs if r["type"] == "token"] == [s.token_id for s in first.steps]
    (done,) = [r for r in recs if r["type"] == "score_done"]
    assert done["tokens"] == first_done.tokens == len(first.steps)
    assert done["perplexity"] == pytest.approx(first_done.perplexity, abs=1e-5)
    close_window(window)
