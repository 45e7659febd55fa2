"""A scored text's export, opened again (File → Open export…), is shown as scoring showed
it (issue 51, #7): it read "[export] Imported" with no perplexity and its colours off, though
its per-token numbers matched."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.model.scoring import saved_score_words  # noqa: E402
from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402


@pytest.fixture
def exported(qtbot, profile, tiny_folder, tmp_path):
    """A window on the tiny model, a text scored and exported, then a new chat with the
    colours off: (window, the export's path, the status bar's figures when it was scored)."""
    window = open_window(qtbot, profile, str(tiny_folder))
    scoring = window.score_controller()
    assert scoring.score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    figures = scoring.perplexity_label.text()
    assert figures.startswith("perplexity ")
    out = tmp_path / "scored.jsonl"
    assert scoring.export("scored", str(out)) == out
    window.new_chat()
    assert not window.color_toggle.isChecked() and scoring.perplexity_label.text() == ""
    yield window, out, figures
    close_window(window)


def test_a_reopened_scored_export_shows_its_perplexity(qtbot, exported):
    window, out, figures = exported
    scoring = window.score_controller()
    assert scoring.open_export(str(out)) is not None
    shown = scoring.perplexity_label.text()
    # The same perplexity, bits and token count as when it was scored; no speed (not measured here).
    assert shown == figures.split(" at ")[0], (shown, figures)
    steps = window.model.last_assistant().branch.steps
    assert saved_score_words(steps) == shown


def test_a_reopened_scored_export_is_titled_by_its_text(qtbot, exported):
    window, out, _ = exported
    assert window.score_controller().open_export(str(out)) is not None
    title = window.model.conversation.title
    assert title.startswith("[export] Scored text: ") and "Imported" not in title
    assert TEXT.startswith(title.removeprefix("[export] Scored text: ")[:20])


def test_a_reopened_scored_export_is_coloured_and_gives_the_colours_back(qtbot, exported):
    window, out, _ = exported
    assert window.score_controller().open_export(str(out)) is not None
    assert window.color_toggle.isChecked()
    label = window.score_controller().perplexity_label
    qtbot.waitUntil(lambda: label.isVisible() and label.width() >= label.sizeHint().width(), timeout=TIMEOUT)
    window.grab().save("/tmp/ls/reopened_export.png")
    window.new_chat()  # the colours were the scored text's, not the person's choice
    assert not window.color_toggle.isChecked()
