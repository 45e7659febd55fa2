"""The app loses nothing and stays usable: ``kill -9`` mid-reply (a real app process started
with ``python -m app --send``), a decode step that raises, and the log file."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.engine.runtime.test_fault_containment import Flaky  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402
from tests.support.tiny_model import MERGES  # noqa: E402

TIMEOUT = 60_000
EOS = 2 + 256 + len(MERGES)  # the tiny model's <|im_end|>


def profile_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        LOGITSCOPE_LOG_DIR=str(home / "logs"),
        QT_QPA_PLATFORM="offscreen",
        PYTHONPATH=str(ROOT),
    )
    return env


def start_long_reply(home: Path, model: Path, top_logprobs: int) -> tuple[subprocess.Popen, Path, Path]:
    """``python -m app --send`` on a fresh ``home`` writing a reply that does not end (EOS
    banned); returns the process, its database and its settings file."""
    env = profile_env(home)
    conf = home / ".config" / "Logitscope" / "Logitscope.conf"  # QSettings' native file on Linux
    conf.parent.mkdir(parents=True)
    params = SamplingParams(
        max_tokens=20000, temperature=1.0, seed=5, top_logprobs=top_logprobs, logit_bias={EOS: -100.0}
    )
    settings = QSettings(str(conf), QSettings.Format.IniFormat)
    settings.setValue("params", json.dumps(params.to_dict()))
    settings.setValue("model", str(model))
    settings.sync()
    db = home / ".local" / "share" / "logitscope" / "logitscope.sqlite3"
    app = subprocess.Popen(
        [sys.executable, "-m", "app", "--send", "write me a long story"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return app, db, conf


def wait_for_steps(app: subprocess.Popen, db: Path, steps: int) -> None:
    """Until ``steps`` tokens of the reply are in the stream journal on disk (120 s: a hang
    guard, the journal commits every 0.25 s while the reply streams)."""
    deadline = time.monotonic() + 120
    while count_steps(db) < steps:
        assert app.poll() is None, app.stderr.read().decode()
        assert time.monotonic() < deadline, f"hang guard: {steps} tokens not saved in 120 s while the reply streamed"
        time.sleep(0.05)


def kill_9(app: subprocess.Popen) -> None:
    """SIGKILL the app while it still writes its reply."""
    assert app.poll() is None, "the reply ended before the kill"
    os.kill(app.pid, signal.SIGKILL)
    app.wait(10)


def reap(app: subprocess.Popen) -> None:
    """A test that failed before its kill leaves no app running."""
    if app.poll() is None:
        app.kill()
        app.wait(10)


def count_steps(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
        try:
            return conn.execute("SELECT COUNT(*) FROM live_steps").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_kill_9_mid_reply_keeps_the_reply_interrupted_and_continuable(qtbot, tmp_path, long_tiny):
    home = tmp_path / "home"
    app, db, conf = start_long_reply(home, long_tiny, top_logprobs=20)
    try:
        wait_for_steps(app, db, 30)
        saved_before = count_steps(db)
        wait_for_steps(app, db, saved_before + 1)  # it goes on writing: more is on disk, then the kill
        kill_9(app)
    finally:
        reap(app)
    at_kill = count_steps(db)
    header = (home / "logs" / "logitscope.log").read_text().splitlines()[0]
    assert header.startswith("==== Logitscope") and str(long_tiny) in header  # the saved model
    assert at_kill > saved_before >= 30  # it was still writing when it was killed

    check = sqlite3.connect(str(db))
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()

    # The next start (the same profile) shows the reply, marked interrupted.
    from app.shell.startup.recovery import continue_interrupted, interrupted_message
    from app.shell.window import MainWindow

    window = MainWindow(db_path=db, settings=QSettings(str(conf), QSettings.Format.IniFormat), model=str(long_tiny))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    assert len(window.store.recovered) == 1
    message = interrupted_message(window.model)
    assert message is not None and window.model.conversation is not None
    branch = message.branch
    assert branch.finish_reason == "interrupted" and len(branch.steps) == at_kill >= saved_before
    assert [s.index for s in branch.steps] == list(range(len(branch.steps)))
    window._redraw_if_dirty()
    entry = next(e for e in window.entries if e.role == "assistant")
    assert "interrupted" in entry.note
    assert "interrupted" in window.recovery_note
    assert window.store.integrity() == "ok"

    # Continue it: the saved tokens are the new reply's start.
    old = [s.token_id for s in branch.steps]
    assert continue_interrupted(window.context)
    qtbot.waitUntil(lambda: any(len(r.new_steps) >= 5 for r in window.model.replies.values()), timeout=TIMEOUT)
    window.stop()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    continued = window.model.last_assistant().branch
    assert continued.id != branch.id and len(continued.steps) > len(old)
    assert [s.token_id for s in continued.steps[: len(old)]] == old
    window.close()
    conn = sqlite3.connect(str(db))
    assert conn.execute("SELECT COUNT(*) FROM live_replies").fetchone()[0] == 0
    conn.close()


class FailingSession:
    """The engine session, its model raising once on the ``fail_at``-th call after loading."""

    def __new__(cls, fail_at: int):
        from engine.session.session import EngineSession

        class _Session(EngineSession):
            def load(self, source, progress=None, precision="auto", kv=None):
                info = super().load(source, progress, precision, kv=kv)
                self.flaky = Flaky(self.scheduler.model, fail_at)
                self.scheduler.model = self.flaky
                return info

        return _Session()


def test_a_failing_step_shows_an_error_keeps_the_reply_and_the_next_request_works(qtbot, tmp_path, tiny_folder):
    from app.shell.window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(
        db_path=tmp_path / "db.sqlite3",
        settings=settings,
        model=str(tiny_folder),
        session_factory=lambda: FailingSession(fail_at=12),
    )
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    params = SamplingParams(max_tokens=60, seed=1, logit_bias={EOS: -100.0})
    window.controls.set_params(params)
    window.composer.setPlainText("hello there")
    window.send()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert "injected failure" in window.last_error
    assert "injected failure" in window.error_box.text()
    first = window.model.last_assistant().branch
    assert first.finish_reason == "error" and 0 < len(first.steps) < 60  # the partial reply, saved
    message_id = window.model.last_assistant().id
    qtbot.waitUntil(lambda: len(window.store.reads.branches(message_id)[0].steps) == len(first.steps))
    window.error_box.close()
    window.last_error = ""
    window.composer.setPlainText("and again")
    window.send()
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    second = window.model.last_assistant().branch
    assert second.finish_reason == "length" and len(second.steps) == 60 and window.last_error == ""
    window.close()


@pytest.mark.qt_no_exception_capture
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_uncaught_exceptions_and_qt_warnings_go_to_the_log(qtbot, tmp_path, monkeypatch):
    from PySide6.QtCore import qWarning

    from app.shell.startup import logging_setup

    monkeypatch.setenv("LOGITSCOPE_LOG_DIR", str(tmp_path / "logs"))
    path = logging_setup.install("tiny-model-path")
    try:
        assert path == tmp_path / "logs" / "logitscope.log"
        monkeypatch.setattr(sys, "__excepthook__", lambda *a: None)
        try:
            raise ValueError("boom in the GUI thread")
        except ValueError:
            sys.excepthook(*sys.exc_info())

        def fail():
            raise KeyError("boom in a thread")

        thread = threading.Thread(target=fail, name="worker-x")
        thread.start()
        thread.join()
        qWarning("a Qt warning for the log")
        logging_setup.note_model("tiny-llama", "/models/tiny")
        text = path.read_text()
        header = text.splitlines()[0]
        assert "Logitscope" in header and logging_setup.app_version() in header and "tiny-model-path" in header
        assert "ValueError: boom in the GUI thread" in text
        assert "KeyError: 'boom in a thread'" in text and "worker-x" in text
        assert "Qt: a Qt warning for the log" in text
        assert "model loaded: tiny-llama" in text
        dialog = logging_setup.show_log()
        qtbot.addWidget(dialog)
        assert "boom in the GUI thread" in dialog.view.toPlainText() and dialog.path == path
        dialog.close()
    finally:
        logging_setup.uninstall()


def test_help_show_log_opens_the_log(qtbot, tmp_path, monkeypatch, tiny_folder):
    from app.shell.startup import logging_setup
    from app.shell.window import MainWindow

    monkeypatch.setenv("LOGITSCOPE_LOG_DIR", str(tmp_path / "logs"))
    logging_setup.install("x")
    try:
        window = MainWindow(
            db_path=tmp_path / "db.sqlite3",
            settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
            model=str(tiny_folder),
        )
        qtbot.addWidget(window)
        qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
        help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
        action = next(a for a in help_menu.actions() if a.text() == "Show log")
        action.trigger()
        assert "model loaded: tiny-llama" in window.window_actions.log_dialog.view.toPlainText()
        window.window_actions.log_dialog.close()
        window.close()
    finally:
        logging_setup.uninstall()


def test_a_database_that_cannot_be_opened_asks_and_starts_fresh(qtbot, tmp_path, monkeypatch, tiny_folder):
    from app.shell.startup import recovery
    from app.shell.window import MainWindow

    db = tmp_path / "db.sqlite3"
    db.write_bytes(os.urandom(4096))
    asked = []
    monkeypatch.setattr(recovery, "ask_override", lambda title, text, choices: asked.append(text) or "new")
    window = MainWindow(
        db_path=db, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat), model=str(tiny_folder)
    )
    qtbot.addWidget(window)
    assert asked and "damaged" in asked[0]
    assert window.store.moved_aside is not None and window.store.moved_aside.exists()
    assert "new database" in window.recovery_note
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    window.close()


def test_failing_writes_while_a_reply_streams_are_kept_and_retried(qtbot, tmp_path, tiny_folder):
    """The file becomes unwritable mid-reply (injected: root can write read-only files):
    the status bar says so, the reply goes on, and every token is saved once writes work."""
    from app.shell.window import MainWindow

    db = tmp_path / "db.sqlite3"
    window = MainWindow(
        db_path=db, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat), model=str(tiny_folder)
    )
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    messages = []
    shown = window.status.show_message
    window.status.show_message = lambda text, ms=4000: (messages.append(text), shown(text, ms))
    journal = window.journal
    journal.retry = 0.2
    real = journal._write_once
    failing = {"on": True}

    def write(conn):
        if failing["on"]:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return real(conn)

    journal._write_once = write
    window.controls.set_params(SamplingParams(max_tokens=80, seed=2, logit_bias={EOS: -100.0}))
    window.composer.setPlainText("hello")
    window.send()
    qtbot.waitUntil(lambda: any("Could not save" in m for m in messages), timeout=TIMEOUT)
    assert "readonly" in window.save_error
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    failing["on"] = False
    qtbot.waitUntil(lambda: any("works again" in m for m in messages), timeout=TIMEOUT)
    assert journal.flush()
    message_id = window.model.last_assistant().id
    qtbot.waitUntil(lambda: len(window.store.reads.branches(message_id)[0].steps) == 80, timeout=TIMEOUT)
    assert window.save_error == ""
    window.close()
    conn = sqlite3.connect(str(db))
    assert conn.execute("SELECT COUNT(*) FROM live_replies").fetchone()[0] == 0
    conn.close()
