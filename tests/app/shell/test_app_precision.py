"""Issue 19 in the app: Models → Precision (saved per model, sent with the load, shown in the
status bar and the About box), each reply's own precision (the inspector, the store, the
export), and Models → Check precision… against ``engine.analysis.fidelity`` run directly."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from app.store.export import records  # noqa: E402
from app.store.export_store import from_store  # noqa: E402
from engine.api.kv_quantization import KVQuantization  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, assistant_entries, close_window, drain_engine_thread, open_window, send  # noqa: E402

PARAMS = SamplingParams(max_tokens=12, top_logprobs=5)


def choose(window, choice: str) -> None:
    """Models → Precision → ``choice``, as a click does."""
    window.precision.menu.aboutToShow.emit()  # the menu opens: its mark follows the model
    (action,) = [a for a in window.precision.group.actions() if a.data() == choice]
    action.trigger()


def select_first_token(window, entry: int) -> None:
    window.model.select((window.entries[entry].stream, 0))
    window._redraw_if_dirty()


def test_the_choice_is_saved_per_model_reaches_the_load_and_each_reply_keeps_its_own(
    qtbot,
    profile,
    tiny_folder,
):
    from app.model.precision import CHOICE
    from app.views.about import about_text
    from engine.session.session import EngineSession

    asked: list[str] = []

    class Recording(EngineSession):
        def load(self, source, progress=None, precision="auto", kv=None):
            asked.append(precision)
            return super().load(source, progress, precision, kv=kv)

    from app.shell.window import MainWindow

    db, settings = profile
    window = open_window(qtbot, profile, str(tiny_folder), session_factory=Recording)
    assert asked == ["auto"] and window.model_info.precision == "float32"
    assert window.model_label.text() == "tiny-llama · float32"
    assert "Computes in float32 (auto)" in about_text(window.model_info)
    checked = [a.data() for a in window.precision.group.actions() if a.isChecked()]
    assert checked == ["auto"]
    send(qtbot, window, "first", PARAMS)

    choose(window, "float16")
    qtbot.waitUntil(lambda: window.model_info.precision == "float16", timeout=TIMEOUT)
    assert asked == ["auto", "float16"] and window.model_info.precision_choice == "float16"
    assert CHOICE.saved(settings, str(tiny_folder)) == "float16"
    assert CHOICE.saved(settings, "default") == "auto"  # per model: another source keeps auto
    assert window.model_label.text() == "tiny-llama · float16"
    text = about_text(window.model_info)
    assert "Computes in float16" in text and "chosen by the user" in text
    send(qtbot, window, "second", PARAMS)

    first, second = assistant_entries(window)
    select_first_token(window, first)
    assert "Computed in: float32" in window.inspector.title.toolTip()
    select_first_token(window, second)
    assert "Computed in: float16" in window.inspector.title.toolTip()
    # As File → Export reads it (Scoring.export): the journal, still draining on its own thread
    # under load, is what the next start recovers, not part of an export made while running.
    exported = records(from_store(window.store, window.model.conversation.id, journal=False))
    assert [r["precision"] for r in exported if r["type"] == "branch"] == ["float32", "float16"]
    close_window(window)

    # Opened again: the model loads in its saved choice; the old reply keeps its own.
    asked.clear()
    window = MainWindow(db_path=db, settings=settings, session_factory=Recording)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    assert asked == ["float16"] and window.model_info.precision == "float16"
    first, _ = assistant_entries(window)
    select_first_token(window, first)
    assert "Computed in: float32" in window.inspector.title.toolTip()
    close_window(window)


def test_a_reply_saved_before_precision_was_recorded_reads_not_recorded(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "old", PARAMS)
    window.store.db.execute("UPDATE branches SET precision = NULL")
    window.store.db.commit()
    window.open_conversation(window.model.conversation.id)
    (entry,) = assistant_entries(window)
    select_first_token(window, entry)
    assert "Computed in: not recorded" in window.inspector.title.toolTip()
    close_window(window)


def test_precision_is_disabled_for_a_server_with_the_reason(qtbot, profile, tiny_folder):
    from app.model.precision import CHOICE, SERVER_CHOOSES
    from engine.remote.servers import KINDS, remote_capabilities

    CHOICE.save(profile[1], str(tiny_folder), "float16")  # in float32 the check has nothing to find
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.precision.menu.isEnabled()
    assert not window.analysis_actions.check_precision.isEnabled()  # nothing selected yet
    assert "Select a token" in window.analysis_actions.check_precision.toolTip()
    local = window.model_info
    server = remote_capabilities(KINDS["mlx_lm"], "raw")  # what a server declares
    window.in_use.info = replace(local, backend="remote", precision="", capabilities=server)
    window.actions.apply(server)  # as a server's model_loaded does
    assert not window.precision.menu.isEnabled()
    assert window.precision.menu.menuAction().toolTip() == SERVER_CHOOSES
    assert "server" in window.analysis_actions.check_precision.toolTip()
    window.in_use.info = local
    close_window(window)


def test_check_precision_shows_what_engine_fidelity_computes(qtbot, profile, tiny_folder, tmp_path):
    from app.model.precision import CHOICE
    from app.shell.engine_thread.fidelity_runner import CHUNK
    from app.views.precision_dialog import COLUMNS
    from engine.api.results import summarize
    from engine.session.session import EngineSession

    CHOICE.save(profile[1], str(tiny_folder), "float16")
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.model_info.precision == "float16"
    send(qtbot, window, "check me", SamplingParams(max_tokens=40, top_logprobs=5))
    (entry,) = assistant_entries(window)
    select_first_token(window, entry)
    assert window.analysis_actions.check_precision.isEnabled()
    window.analysis_actions.check_precision.trigger()
    qtbot.waitUntil(lambda: window.precision_check.dialog is not None, timeout=TIMEOUT)
    dialog = window.precision_check.dialog
    assert not window.status.progress.isVisible() and not window.last_error

    # The same reply through engine.analysis.fidelity here, in the same precision and chunks.
    steps = window.entries[entry].steps
    message = window.model.message_of(window.entries[entry].stream)
    session = EngineSession()
    session.load(str(tiny_folder), precision="float16")
    rows = list(session.check_fidelity(list(window.model.context_for(message)), [s.token_id for s in steps], CHUNK))
    expected = summarize("float16", rows)
    assert dialog.summary == expected
    assert expected.tokens == len(steps) and expected.kld_max > 0 and expected.top5_max_diff > 0
    assert sorted(dialog.rows, key=lambda r: r.index) == rows
    # Worst first, and the table says the same numbers.
    diffs = [r.top5_max_diff for r in dialog.rows]
    assert diffs == sorted(diffs, reverse=True)
    worst = dialog.rows[0]
    cells = [dialog.table.item(0, c).text() for c in range(len(COLUMNS))]
    assert cells[0] == str(worst.index) and cells[3] == f"{worst.top5_max_diff:.4f}"
    text = dialog.summary_label.text()
    assert "float16" in text and f"{expected.top5_max_diff:.4f}" in text and str(expected.tokens) in text
    assert ("Within 0.03" in text) == expected.within_tolerance
    assert dialog.grab().save(str(tmp_path / "check-precision.png"))
    dialog.close()
    close_window(window)


def test_a_float32_model_is_told_at_once_that_there_is_nothing_to_check(qtbot, profile, tiny_folder):
    """It took ~40 s to report 0 everywhere for the default model (float32)."""
    from app.model.precision_check import ALREADY_FLOAT32

    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.model_info.precision == "float32" and window.model_info.kv.bits is None
    send(qtbot, window, "check me", SamplingParams(max_tokens=8))
    (entry,) = assistant_entries(window)
    select_first_token(window, entry)
    action = window.analysis_actions.check_precision
    assert not action.isEnabled() and ALREADY_FLOAT32 in action.toolTip()
    assert window.precision_check.start() is None  # the job is never sent
    assert window.precision_check.running is None and not window.status.progress.isVisible()
    assert ALREADY_FLOAT32 in window.statusBar().currentMessage()
    # A quantized KV cache is something to check, in float32 too.
    window.in_use.info = replace(window.model_info, kv=KVQuantization(bits=8))
    window.actions.refresh()
    assert action.isEnabled()
    close_window(window)


def test_a_running_check_stops_with_esc_and_errors_are_shown(qtbot, profile, tiny_folder):
    from app.model.precision import CHOICE

    CHOICE.save(profile[1], str(tiny_folder), "float16")
    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "stop me", SamplingParams(max_tokens=80))
    (entry,) = assistant_entries(window)
    select_first_token(window, entry)
    job = window.precision_check.start()
    assert job is not None and window.status.progress.isVisible()
    assert "Checking precision" in window.statusBar().currentMessage()
    window.stop()
    assert window.precision_check.running is None and "stopped" in window.statusBar().currentMessage()
    drain_engine_thread(qtbot, window)  # a late answer of the cancelled check has arrived
    assert window.precision_check.dialog is None  # and was dropped
    # A failure on the engine's side reaches a dialog, not silence.
    window.precision_check._on_failed(job.tag, RuntimeError("x"))  # not running: ignored
    window.precision_check.checks.running = job  # as if it still ran (app/model/precision_check.py)
    window.precision_check._on_failed(job.tag, RuntimeError("the check broke"))
    assert "the check broke" in window.last_error
    close_window(window)
