"""Every way out of the data sees a reply the app was writing when it was killed: a real app
process (``python -m app --send``, a fresh HOME) killed with SIGKILL mid-reply, then
``python -m app export`` run as a subprocess before any window reopens the database
(JSON Lines and CSV), the app's own export once a window has recovered the reply, and
File → Open export of the command's file; each marks the reply ``"interrupted": true``."""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings  # noqa: E402

from tests.app.shell.test_app_recovery import count_steps, kill_9, profile_env, reap, start_long_reply, wait_for_steps  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402

TIMEOUT = 60_000


def kill_mid_reply(home: Path, model: Path) -> tuple[Path, Path]:
    """Start the app on a fresh ``home`` sending a long reply, SIGKILL it once 30 tokens are
    in the journal; returns the database and the settings file."""
    app, db, conf = start_long_reply(home, model, top_logprobs=5)
    try:
        wait_for_steps(app, db, 30)
        kill_9(app)
    finally:
        reap(app)
    return db, conf


def cli_export(home: Path, db: Path, out: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "app", "export", "--all", "--out", str(out), "--db", str(db)],
        env=profile_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def the_interrupted_reply(recs: list[dict], tokens: int) -> None:
    """One assistant reply, shown, marked interrupted, holding every token the journal had."""
    (branch,) = [r for r in recs if r["type"] == "branch"]
    assert branch["interrupted"] is True and branch["finish_reason"] == "interrupted"
    (message,) = [r for r in recs if r["type"] == "message" and r["role"] == "assistant"]
    assert message["active_branch"] == branch["branch"]
    tokens_of = [r for r in recs if r["type"] == "token" and r["request"] == branch["request"]]
    assert [r["index"] for r in tokens_of] == list(range(tokens))
    assert branch["text"] == "".join(r["text"] for r in tokens_of)
    (done,) = [r for r in recs if r["type"] == "done"]
    assert done["interrupted"] is True and done["tokens"] == tokens


def test_an_interrupted_reply_is_in_every_export(qtbot, tmp_path, long_tiny):
    home = tmp_path / "home"
    db, conf = kill_mid_reply(home, long_tiny)
    at_kill = count_steps(db)
    assert at_kill >= 30

    # The command, before any window has opened the database again: JSON Lines and CSV.
    out = tmp_path / "all.jsonl"
    cli_export(home, db, out)
    the_interrupted_reply(read(out), at_kill)
    table = tmp_path / "all.csv"
    cli_export(home, db, table)
    with open(table, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {int(r["index"]) for r in rows} == set(range(at_kill)) and {r["interrupted"] for r in rows} == {"1"}
    check = sqlite3.connect(str(db))  # the command only read the database: the journal is as it was
    assert check.execute("SELECT COUNT(*) FROM live_steps").fetchone()[0] == at_kill
    check.close()

    # The app: the next start recovers the reply; its own export marks it the same.
    from app.shell.startup.recovery import interrupted_message
    from app.shell.window import MainWindow

    window = MainWindow(db_path=db, settings=QSettings(str(conf), QSettings.Format.IniFormat), model=str(long_tiny))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    branch = interrupted_message(window.model).branch
    window.select_token((("branch", branch.id), 3))
    scoring = window.score_controller()
    app_out = scoring.export("conversation", str(tmp_path / "app.jsonl"))
    app_recs = read(app_out)
    the_interrupted_reply(app_recs, at_kill)
    assert [r for r in app_recs if r["type"] == "token"] == [r for r in read(out) if r["type"] == "token"]

    # File → Open export of the command's file: the reply comes back interrupted, continuable.
    imported = scoring.open_export(str(out))
    assert imported is not None and window.model.conversation.id == imported
    message = interrupted_message(window.model)
    assert message is not None and len(message.branch.steps) == at_kill
    window._redraw_if_dirty()
    (entry,) = [e for e in window.entries if e.role == "assistant"]
    assert "interrupted" in entry.note
    window.close()
