"""A reply written under a grammar in the app, with the tiny model: the reply follows it, its
heading and the status bar say how it ended, the chain view's grammar column shows the mass
the grammar took, the tooltip and the timeline's row show each token's mask, a branch from
inside the reply continues under the grammar, and the records survive the store and an export."""

from __future__ import annotations

import csv
import re

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, assistant_entries, close_window, open_window, send  # noqa: E402

PATTERN = "[a-c]{3}-[0-9]{2}"


@pytest.fixture
def regex_reply(qtbot, profile, tiny_folder):
    """The app on the tiny model with one sampled reply written under PATTERN: the window,
    the reply's chat entry, its steps and the model's end-of-text ids."""
    window = open_window(qtbot, profile, str(tiny_folder))
    try:
        params = SamplingParams(max_tokens=24, temperature=0.8, seed=2, grammar=("regex", PATTERN))
        send(qtbot, window, "a code please", params)
        (at,) = assistant_entries(window)
        entry = window.entries[at]
        yield window, entry, entry.steps, window.model_info.eos_token_ids
    finally:
        close_window(window)


def test_a_reply_under_a_regex_follows_it_and_says_how_it_ended(regex_reply):
    window, entry, steps, eos = regex_reply
    text = "".join(s.text for s in steps if s.token_id not in eos)
    assert re.fullmatch(PATTERN, text), text
    assert entry.note == "[regex: complete]"
    assert "complete: the grammar ended it" in window.statusBar().currentMessage()


def test_the_chain_view_shows_the_grammars_column_and_the_mass_it_took(regex_reply):
    from app.views.chain_view import VALUE_ROLE
    from app.views.chat_view import tooltip_for

    window, entry, steps, _ = regex_reply
    window.select_token((entry.stream, 0))
    model = window.inspector.chain_view.model()
    heads = [model.headerData(c, Qt.Orientation.Horizontal, VALUE_ROLE) for c in range(model.columnCount())]
    assert heads[:2] == ["raw", "grammar"]
    header = model.headerData(1, Qt.Orientation.Horizontal)
    assert header.splitlines()[-1] in ("forced", f"−{100 * steps[0].grammar.removed:.1f}%")
    removed = [r for r, c in enumerate(window.inspector.candidates) if c.removed_by == "grammar"]
    assert removed and all(model.data(model.index(r, 1)) == "✕ grammar" for r in removed)
    assert "tokens allowed" in tooltip_for(steps[0]) or "token allowed" in tooltip_for(steps[0])


def test_the_timelines_grammar_row_is_switched_on_from_the_models_menu(regex_reply):
    window, _, _, _ = regex_reply
    row = next(c for c in window.step_analyses if c.row.__class__.__name__ == "GrammarRow")
    row.action.setChecked(True)
    row.refresh()
    assert row.row.plot.isVisible() and "grammar removed" in row.row.plot.titleLabel.text


def test_a_branch_from_inside_the_reply_continues_under_the_grammar(qtbot, regex_reply):
    window, entry, steps, eos = regex_reply
    second = next(c for c in steps[1].top if c.removed_by is None and c.token_id != steps[1].token_id)
    window.select_token((entry.stream, 1))
    window.pick_token(second.token_id, second.text)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    (at,) = assistant_entries(window)
    branched = window.entries[at].steps
    assert branched[1].token_id == second.token_id
    again = "".join(s.text for s in branched if s.token_id not in eos)
    assert re.fullmatch(PATTERN, again), again


def test_the_grammar_records_are_saved_and_exported(qtbot, regex_reply, tmp_path):
    from app.store.export import read_jsonl, write_jsonl
    from app.store.export_csv import write_csv
    from app.store.export_store import from_store

    window, _, steps, _ = regex_reply
    out = tmp_path / "grammar.jsonl"

    def exported() -> list[dict]:  # a reply is saved off the GUI thread once it ends
        write_jsonl(from_store(window.store, window.model.conversation.id, journal=False), out)
        return [r for r in read_jsonl(out) if r.get("type") == "token" and "grammar" in r]

    qtbot.waitUntil(lambda: len(exported()) >= len(steps), timeout=TIMEOUT)
    write_csv(read_jsonl(out), tmp_path / "grammar.csv")
    with open(tmp_path / "grammar.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["grammar_allowed"] for r in rows)
    assert {r["grammar_accepting"] for r in rows} == {"0", "1"}
