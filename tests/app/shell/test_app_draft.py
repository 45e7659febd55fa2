"""Issue 36, the app: Models → Draft model… on the real worker and EngineSession, with the tests'
tiny model drafted by its own weights in bfloat16 (close, not equal: some proposals rejected).

The reply is the one the running model writes alone; each token's outcome colours the chat
when the switch is on, the inspector's Draft tab shows both models' candidates, the
timeline's acceptance row follows the reply, the choice is saved for the model and loaded
again with it, a draft with another vocabulary is refused in the engine's words with the
draft in use unchanged, and an export carries every token's draft record."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QColor  # noqa: E402

from app.model.draft import DraftChoice, DraftChoices  # noqa: E402
from engine.api.draft import Outcome  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, assistant_entries, close_window, open_window, send  # noqa: E402
from tests.support.tiny_model import write_tiny_model  # noqa: E402
from tests.support.tiny_reasoning import write_qwen3_style  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft")
    return (
        write_tiny_model(root / "tiny", seed=0),
        write_tiny_model(root / "near", seed=0, dtype="bfloat16"),
        write_qwen3_style(root / "other"),
    )


def params(window, **changes) -> SamplingParams:
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    return SamplingParams(**{"temperature": 0.0, "max_tokens": 30, "top_logprobs": 5, "logit_bias": no_eos, **changes})


def use_draft(qtbot, window, source, tokens: int = 4):
    action = window.draft.action
    assert action.isEnabled(), action.toolTip()
    action.trigger()
    dialog = window.draft.dialog
    assert dialog is not None and dialog.isVisible()
    dialog.source.setCurrentText(str(source))
    dialog.tokens.setValue(tokens)
    dialog.use_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=TIMEOUT)
    return dialog


def reply_steps(window):
    entry = window.entries[assistant_entries(window)[-1]]
    return entry.stream, entry.steps


def test_a_draft_in_use_is_named_and_saved_for_its_model(qtbot, profile, models):
    tiny, near, _ = models
    window = open_window(qtbot, profile, str(tiny))
    send(qtbot, window, "the cat", params(window))
    _, plain = reply_steps(window)
    assert all(s.draft is None for s in plain)
    assert not window.central.draft_toggle.isVisible()
    dialog = use_draft(qtbot, window, near)
    assert "Draft in use" in dialog.message.text() and "4 tokens per block" in dialog.message.text()
    assert window.draft.label.text().startswith("draft: ")
    assert DraftChoices(window.settings).get(str(tiny)).tokens == 4
    close_window(window)


@pytest.fixture
def drafted(qtbot, profile, models):
    """The app on the tiny model: a plain greedy reply, then the bfloat16 draft in use (4 tokens
    a block) and the same prompt in a new chat. Yields the window, the plain reply's steps, and
    the drafted reply's stream and steps."""
    tiny, near, _ = models
    window = open_window(qtbot, profile, str(tiny))
    try:
        send(qtbot, window, "the cat", params(window))
        _, plain = reply_steps(window)
        use_draft(qtbot, window, near).close()
        window.window_actions.new_chat.trigger()  # the same prompt as the plain reply's
        send(qtbot, window, "the cat", params(window))
        stream, steps = reply_steps(window)
        yield window, plain, stream, steps
    finally:
        close_window(window)


def test_a_drafted_reply_is_the_one_the_model_writes_alone(drafted):
    _, plain, _, steps = drafted
    assert [s.token_id for s in steps] == [s.token_id for s in plain]  # the same reply
    outcomes = [s.draft.outcome for s in steps if s.draft is not None]
    assert Outcome.ACCEPTED in outcomes and (Outcome.REJECTED in outcomes or Outcome.BONUS in outcomes)


def test_the_chat_shades_each_drafted_token_by_its_outcome(drafted):
    """The switch appears with such a reply and shades each token by its outcome."""
    window, _, stream, steps = drafted
    window._redraw_if_dirty()
    assert window.central.draft_toggle.isVisible()
    window.central.color_toggle.setChecked(True)
    window.central.draft_toggle.setChecked(True)
    assert not window.central.color_toggle.isChecked()  # one colouring at a time
    assert "accepted" in window.central.legend.text() and "bonus" in window.central.legend.text()
    colors = window.central.colors
    drafted_at = next(i for i, s in enumerate(steps) if s.draft is not None and s.draft.outcome is Outcome.ACCEPTED)
    assert _shade(window, stream, drafted_at) == QColor(colors.accepted)
    assert _shade(window, stream, 0) is None  # the first token had no draft


def test_the_inspectors_draft_tab_shows_the_proposal_q_p_and_the_acceptance(drafted):
    from app.views.inspector import DRAFT_TAB

    window, _, stream, steps = drafted
    drafted_at = next(i for i, s in enumerate(steps) if s.draft is not None and s.draft.outcome is Outcome.ACCEPTED)
    window.model.select((stream, drafted_at))
    window._redraw_if_dirty()
    inspector = window.inspector
    assert inspector.tabs.isTabVisible(DRAFT_TAB)
    inspector.tabs.setCurrentIndex(DRAFT_TAB)
    view = inspector.draft_view
    header = view.header.text()
    assert header.startswith("Accepted") and ": kept." in header and "Classic speculative sampling" in header
    marks = [view.table.item(r, 0).text() for r in range(view.table.rowCount())]
    assert "◆●" in marks  # the proposal was the draw
    window.model.select((stream, 0))
    window._redraw_if_dirty()
    assert not inspector.tabs.isTabVisible(DRAFT_TAB) and inspector.tabs.currentIndex() != DRAFT_TAB


def test_the_timelines_acceptance_row_is_switched_on_with_the_draft(drafted):
    window, _, _, _ = drafted
    row = next(c for c in window.step_analyses if c.row.__class__.__name__ == "AcceptanceRow")
    assert row.action.isChecked()
    row.refresh()
    assert row.row.plot.isVisible() and "acceptance" in row.row.plot.titleLabel.text


def test_an_export_carries_every_drafted_tokens_record(qtbot, drafted, tmp_path):
    import csv

    from app.store.export import read_jsonl, write_jsonl
    from app.store.export_csv import write_csv
    from app.store.export_store import from_store

    window, _, _, steps = drafted
    out = tmp_path / "drafted.jsonl"

    def exported() -> list[dict]:  # the reply is saved off the GUI thread once it ends
        write_jsonl(from_store(window.store, window.model.conversation.id, journal=False), out)
        return [r for r in read_jsonl(out) if r.get("type") == "token" and "draft" in r]

    qtbot.waitUntil(lambda: bool(exported()), timeout=TIMEOUT)
    back = exported()
    assert {r["draft"]["outcome"] for r in back} >= {"accepted"}
    # One record for each drafted token of the reply, in order, with its outcome (the record
    # is JSON, read back from the file).
    assert [r["draft"]["outcome"] for r in back] == [str(s.draft.outcome) for s in steps if s.draft is not None]
    write_csv(read_jsonl(out), tmp_path / "drafted.csv")
    with open(tmp_path / "drafted.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {r["draft_outcome"] for r in rows} >= {"", "accepted"}


def test_a_draft_with_another_vocabulary_is_refused_and_the_draft_in_use_stays(qtbot, drafted, models):
    """Refused in the engine's words, with the draft in use unchanged."""
    window, _, _, _ = drafted
    _, near, other = models
    dialog = use_draft(qtbot, window, other)
    assert "vocabulary" in dialog.message.text()
    assert window.draft.held is not None and window.draft.held.source == str(near)


def test_the_saved_draft_is_loaded_again_with_its_model_and_no_draft_forgets_it(qtbot, profile, models):
    tiny, near, _ = models
    DraftChoices(profile[1]).set(str(tiny), DraftChoice(str(near), "auto", 2))
    window = open_window(qtbot, profile, str(tiny))
    qtbot.waitUntil(lambda: window.draft.held is not None, timeout=TIMEOUT)
    assert window.draft.held.tokens == 2
    window.draft.open_dialog()
    window.draft.dialog.release_button.click()
    qtbot.waitUntil(lambda: window.draft.held is None, timeout=TIMEOUT)
    assert DraftChoices(window.settings).get(str(tiny)) is None
    send(qtbot, window, "the cat", params(window, max_tokens=6))
    assert all(s.draft is None for s in reply_steps(window)[1])
    close_window(window)


def _shade(window, stream, index):
    from PySide6.QtGui import QTextCursor

    writer = window.chat.writer
    span = writer.span_of((stream, index))
    cursor = QTextCursor(window.chat.document())
    cursor.setPosition(span[0] + 1)
    brush = cursor.charFormat().background()
    return brush.color() if brush.color().alpha() > 0 else None  # NO_BRUSH: transparent


def test_a_cancelled_load_stops_at_its_next_report_and_changes_nothing(qtbot):
    """The runner's cancel is a flag its progress callback reads (a queued signal would wait
    for the load): a load cancelled while it reports ends as DraftCancelled, never loaded."""
    from app.shell.engine_thread.draft_runner import DraftCancelled, DraftRunner
    from engine.api.draft import DraftModel

    class Session:  # stands in for EngineSession.load_draft's reports only
        info = object()
        loaded = None

        def load_draft(self, source, precision, tokens, progress):
            progress("reading", 0.2)
            progress("converting", 0.6)
            self.loaded = DraftModel(source, source, precision, tokens)
            return self.loaded

    session = Session()

    class Worker:
        def session_with(self, capability):
            return session if capability == "draft" else None

    runner = DraftRunner(Worker())
    seen = []

    def loading(tag, stage, _fraction):
        seen.append(stage)
        if tag == 1 and stage == "reading":
            runner.cancel(tag)  # Cancel pressed while the load reports

    runner.loading.connect(loading)
    runner.failed.connect(lambda tag, exc: seen.append(exc))
    runner.loaded.connect(lambda tag, held: seen.append(held))
    runner.load(1, "m", "auto", 3)
    assert seen[:2] == ["checking memory", "reading"] and isinstance(seen[2], DraftCancelled) and len(seen) == 3
    assert session.loaded is None
    runner.load(2, "m", "auto", 3)  # the next load is not cancelled by the last one's flag
    assert seen[-1] == DraftModel("m", "m", "auto", 3)
