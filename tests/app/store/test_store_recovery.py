"""Nothing lost: replies written while they stream (the stream journal), recovered as
"interrupted" after a crash, failed writes kept and retried, schema 3 -> 4 with a copy
first, and every database that cannot be opened met with a message and a way out."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from app.shell.startup.db_open import StoreUnavailable, diagnose, open_store
from app.store.store import INTERRUPTED, SCHEMA_VERSION, NewerSchemaError, Store, backup_path
from app.store.stream import StreamJournal
from engine.api.codec import CODEC_VERSION
from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from tests.app.store.test_store_migration import user_version
from tests.support.paths import DATA

FIXTURE_V3 = DATA / "store_v3.sqlite3"
FIXTURE_V4 = DATA / "store_v4.sqlite3"


def tables(path: Path) -> set[str]:
    db = sqlite3.connect(str(path))
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()


def make_step(index: int, params: SamplingParams) -> TokenStep:
    chain = ("raw", "temperature")
    return TokenStep(
        request_id=0,
        index=index,
        position=10 + index,
        token_id=100 + index,
        text=f"t{index} ",
        piece=f"t{index}",
        chain=chain,
        logprobs=(-0.5, -0.25),
        entropies=(1.0, 0.5),
        survivors=(50, 50),
        top=(),
        params=params,
        forced=False,
    )


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    yield store
    store.close()


def new_turn(store: Store):
    conversation = store.writes.new_conversation("sys", "title")
    user = store.writes.add_user_message(conversation.id, "hello", None)
    return conversation, store.writes.add_assistant_message(conversation.id, user.id)


def journal_rows(path: Path) -> tuple[int, int]:
    db = sqlite3.connect(str(path))
    try:
        return (
            db.execute("SELECT COUNT(*) FROM live_replies").fetchone()[0],
            db.execute("SELECT COUNT(*) FROM live_steps").fetchone()[0],
        )
    finally:
        db.close()


# Schema ---------------------------------------------------------------------------------------


def test_the_current_release_database_migrates_with_a_copy_first(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    shutil.copy(FIXTURE_V3, path)
    assert user_version(path) == 3 and "live_replies" not in tables(path)
    store = Store(path)
    assert store.migrated_from == 3 and user_version(path) == SCHEMA_VERSION
    assert {"live_replies", "live_steps", "compare_runs"} <= tables(path)
    copy = backup_path(path, 3)
    assert copy.exists() and user_version(copy) == 3 and "live_replies" not in tables(copy)
    (conversation,) = store.reads.conversations()
    assert conversation.title == "Capital of France"
    assert len(store.reads.compare_runs(conversation.id)) == 1
    assert store.integrity() == "ok"
    store.close()
    again = Store(path)
    assert again.migrated_from is None
    again.close()


def test_the_last_release_database_migrates_and_its_journal_is_recovered(tmp_path):
    """Schema 4 (written by the last release, tests/data/make_store_v4.py) with a reply left
    in the stream journal: model_source is added (NULL for what was saved before), the copy
    keeps version 4, the interrupted reply is recovered, and replies saved now record it."""
    path = tmp_path / "logitscope.sqlite3"
    shutil.copy(FIXTURE_V4, path)
    assert user_version(path) == 4 and journal_rows(path) == (1, 2)
    store = Store(path)
    assert store.migrated_from == 4 and user_version(path) == SCHEMA_VERSION and user_version(backup_path(path, 4)) == 4
    (recovered,) = store.writes.recover_interrupted()
    (conversation,) = store.reads.conversations()
    thread = store.reads.thread(conversation.id)
    assert thread[-1].branch.id == recovered and thread[-1].branch.finish_reason == INTERRUPTED
    assert len(thread[-1].branch.steps) == 2 and thread[-1].branch.model_source is None
    assert all(b.model_source is None for m in thread if m.role == "assistant" for b in m.branches)
    store.note_model("tiny", "/models/tiny")
    saved = store.writes.add_branch(thread[-1].id, [], "x", "stop", "tiny", SamplingParams())
    assert saved.model_source == "/models/tiny"
    assert store.reads.branches(thread[-1].id)[-1].model_source == "/models/tiny"
    assert store.integrity() == "ok"
    store.close()


# The stream journal -------------------------------------------------------------------------------


HANG_GUARD_S = 30.0
"""How long a test waits for a commit the journal makes by itself (within its 0.25 s interval):
a hang guard, not a speed asked of the machine."""


def wait_for(condition, what: str) -> None:
    """Poll ``condition`` until it holds; fail only past the hang guard."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"hang guard: {what} not within {HANG_GUARD_S} s"
        time.sleep(0.01)


def test_steps_are_committed_while_streaming_by_the_interval_or_a_full_batch(store):
    """The writer commits what is queued while the reply goes on: after its interval with no
    further step, flush or end (each wait is on the rows another connection reads, with a hang
    guard, not on the clock), and at once when ``batch`` steps wait, whatever the interval."""
    _, message = new_turn(store)
    params = SamplingParams(max_tokens=500)
    journal = StreamJournal(store.path, interval=0.25)
    steps: list[TokenStep] = []
    for i in range(40):
        steps.append(make_step(i, params))
        journal.token(7, message.id, "tiny", params, steps)
        if i in (0, 13, 26):  # then nothing more until the journal has committed on its own
            queued = len(steps)
            wait_for(lambda n=queued: journal_rows(store.path)[1] >= n, f"the first {queued} steps committed")
    assert journal.commits >= 3  # one at each of the three waits, none asked for
    assert journal.flush()
    assert journal_rows(store.path) == (1, 40)
    journal.close()

    _, message = new_turn(store)
    journal = StreamJournal(store.path, interval=3600.0, batch=8)  # the interval never comes
    journal.token(8, message.id, "tiny", params, [make_step(i, params) for i in range(8)])
    wait_for(lambda: journal_rows(store.path) == (2, 48), "a full batch committed without its interval")
    journal.close()


def test_an_interrupted_reply_is_recovered_as_a_branch(store):
    conversation, message = new_turn(store)
    params = SamplingParams(temperature=0.7, max_tokens=99)
    store.note_model("tiny", "/models/tiny.gguf", "bfloat16")
    journal = StreamJournal(store.path, sources=store.model_sources, precisions=store.model_precisions)
    steps = [make_step(i, params) for i in range(12)]
    journal.token(1, message.id, "tiny", params, steps)
    assert journal.flush()
    journal._thread.join(0)  # the app "dies" here: nothing more is written
    reopened = Store(store.path)
    (branch_id,) = reopened.writes.recover_interrupted()
    assert journal_rows(store.path) == (0, 0)
    message_again = reopened.reads.thread(conversation.id)[-1]
    branch = message_again.branch
    assert branch.id == branch_id and branch.finish_reason == INTERRUPTED
    assert [s.token_id for s in branch.steps] == [s.token_id for s in steps]
    assert branch.text == "".join(s.text for s in steps) and branch.params == params and branch.model == "tiny"
    assert branch.model_source == "/models/tiny.gguf" and branch.precision == "bfloat16"
    assert reopened.writes.recover_interrupted() == []
    assert reopened.integrity() == "ok"
    reopened.close()
    journal.close()


def test_saved_and_dropped_replies_leave_no_journal_rows(store):
    _, message = new_turn(store)
    params = SamplingParams()
    journal = StreamJournal(store.path)
    steps = [make_step(i, params) for i in range(5)]
    journal.token(1, message.id, "tiny", params, steps)
    journal.token(2, message.id, "tiny", params, steps[:2])
    assert journal.flush() and journal_rows(store.path) == (2, 7)
    branch = store.writes.add_branch(message.id, steps, "text", "stop", "tiny", params, "[]")
    journal.saved(1, branch.id)
    journal.dropped(2)
    assert journal.flush()
    assert journal_rows(store.path) == (0, 0)
    # The journal wrote the branch's steps (the GUI's own write may come later, the same).
    assert [s.token_id for s in store.reads.branches(message.id)[0].steps] == [s.token_id for s in steps]
    journal.close()


def test_a_reply_saved_just_before_a_crash_gets_its_steps_not_a_second_branch(store):
    conversation, message = new_turn(store)
    params = SamplingParams()
    journal = StreamJournal(store.path)
    steps = [make_step(i, params) for i in range(6)]
    journal.token(1, message.id, "tiny", params, steps)
    assert journal.flush()
    store.writes.add_branch(message.id, steps, "text", "stop", "tiny", params, "[]")  # then the app dies
    other = Store(store.path)
    assert other.writes.recover_interrupted() == []
    (branch,) = other.reads.branches(message.id)
    assert branch.finish_reason == "stop" and len(branch.steps) == 6
    other.close()
    journal.close()


def test_a_failing_write_keeps_the_steps_and_retries(store):
    _, message = new_turn(store)
    params = SamplingParams()
    errors, recovered = [], []
    journal = StreamJournal(
        store.path, interval=0.05, retry=0.1, on_error=errors.append, on_recovered=lambda: recovered.append(1)
    )
    real = journal._write_once
    failures = {"left": 5}

    def flaky(db):
        if failures["left"] > 0:
            failures["left"] -= 1
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return real(db)

    journal._write_once = flaky
    steps = [make_step(i, params) for i in range(10)]
    journal.token(1, message.id, "tiny", params, steps)
    deadline = time.monotonic() + 5
    while not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert errors and "readonly" in str(errors[0]) and journal_rows(store.path) == (0, 0)
    steps += [make_step(i, params) for i in range(10, 15)]
    journal.token(1, message.id, "tiny", params, steps)  # more tokens while failing: kept too
    while not recovered and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recovered and len(errors) == 1 and journal.failing is None
    assert journal.flush() and journal_rows(store.path) == (1, 15)
    journal.close()


@contextlib.contextmanager
def read_only(*paths: Path):
    """Make ``paths`` read-only: chmod, or for root (who writes anyway) the immutable flag."""
    root = os.geteuid() == 0
    if root and shutil.which("chattr") is None:
        pytest.skip("root without chattr cannot make a file read-only")
    done = []
    try:
        for path in paths:
            if root:
                if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                    pytest.skip("chattr +i is not allowed here")
            else:
                path.chmod(0o555 if path.is_dir() else 0o444)
            done.append(path)
        yield
    finally:
        for path in done:
            if root:
                subprocess.run(["chattr", "-i", str(path)], check=True)
            else:
                path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_read_only_database_file_is_met_with_a_new_file(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    store = Store(path)
    store.writes.new_conversation("sys", "kept")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    with read_only(path):
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            Store(path)
        ask = Asker("new")
        store = open_store(path, ask)
        assert "read-only" in ask.asked[0][0] and ask.asked[0][1][0] == "retry"
        store.close()
    if store.moved_aside is None:  # an immutable file (root's read-only) cannot be renamed
        assert store.opened_instead and store.path != path
        old = path
    else:  # a rename needs the folder, not the file, writable
        assert aside(path) == [store.moved_aside] and store.path == path
        old = store.moved_aside
    kept = Store(old)
    assert [c.title for c in kept.reads.conversations()] == ["kept"]
    kept.close()


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_database_made_read_only_mid_session_is_retried(store):
    _, message = new_turn(store)
    params = SamplingParams()
    errors, recovered = [], []
    journal = StreamJournal(
        store.path, interval=0.05, retry=0.1, on_error=errors.append, on_recovered=lambda: recovered.append(1)
    )
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with read_only(*store.path.parent.iterdir()):
        journal.token(1, message.id, "tiny", params, [make_step(0, params)])
        deadline = time.monotonic() + 5
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
    assert errors and not recovered
    deadline = time.monotonic() + 5
    while not recovered and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recovered and journal.flush() and journal_rows(store.path) == (1, 1)
    journal.close()


# Databases that cannot be opened -----------------------------------------------------------------


class Asker:
    def __init__(self, *answers: str) -> None:
        self.answers, self.asked = list(answers), []

    def __call__(self, title: str, text: str, choices: list[str]) -> str:
        self.asked.append((text, choices))
        return self.answers.pop(0)


def aside(path: Path) -> list[Path]:
    return sorted(
        p for p in path.parent.iterdir() if ".unreadable-" in p.name and not p.name.endswith(("-wal", "-shm"))
    )


def test_a_corrupt_file_is_moved_aside_for_a_new_one(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    ask = Asker("new")
    store = open_store(path, ask)
    ((text, choices),) = ask.asked
    assert "damaged" in text and choices == ["new", "quit"]
    (old,) = aside(path)
    assert old.read_bytes() == garbage and store.moved_aside == old
    assert store.path == path and user_version(path) == SCHEMA_VERSION and store.reads.conversations() == []
    store.close()


def test_quit_keeps_the_file_and_raises(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(StoreUnavailable):
        open_store(path, Asker("quit"))
    assert path.exists() and aside(path) == []


def test_a_newer_database_is_refused_with_a_way_out(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    Store(path).close()
    db = sqlite3.connect(str(path))
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(NewerSchemaError):
        Store(path)
    ask = Asker("new")
    store = open_store(path, ask)
    assert "newer version" in ask.asked[0][0]
    (old,) = aside(path)
    assert user_version(old) == SCHEMA_VERSION + 1 and user_version(path) == SCHEMA_VERSION
    store.close()


def test_a_locked_database_can_be_retried(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    Store(path).close()
    holder = sqlite3.connect(str(path))
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    released = []

    def ask(title, text, choices):
        assert "locked" in text and choices[0] == "retry"
        holder.rollback()
        holder.close()  # the other program quits; try again
        released.append(1)
        return "retry"

    store = open_store(path, ask, timeout=0.2)
    assert released == [1] and store.path == path and store.moved_aside is None
    store.close()


def test_a_locked_database_can_be_left_for_a_new_file(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    store = Store(path)
    store.writes.new_conversation("sys", "kept")
    store.close()
    holder = sqlite3.connect(str(path))
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    store = open_store(path, Asker("new"), timeout=0.2)
    assert store.reads.conversations() == []
    holder.rollback()
    holder.close()
    (old,) = aside(path)
    kept = Store(old)
    assert [c.title for c in kept.reads.conversations()] == ["kept"]
    kept.close()
    store.close()


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_read_only_folder_gets_a_new_file_elsewhere(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "logitscope.sqlite3"
    store = Store(path)
    store.writes.new_conversation("sys", "kept")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    for side in folder.glob("*-*"):
        side.unlink()  # -wal / -shm: a read-only folder cannot make them
    with read_only(path, folder):
        ask = Asker("new")
        store = open_store(path, ask)
        assert "read-only" in ask.asked[0][0]
        assert store.opened_instead and store.path != path and store.path.parent != folder
        assert store.moved_aside is None and path.exists()  # the old file stays where it was
        store.close()


@pytest.mark.parametrize(
    "message, words",
    [
        ("attempt to write a readonly database", "read-only"),
        ("unable to open database file", "read-only"),
        ("database or disk is full", "disk is full"),
        ("database is locked", "locked"),
        ("file is not a database", "damaged"),
    ],
)
def test_each_failure_is_told_in_words(tmp_path, message, words):
    exc = sqlite3.OperationalError(message) if "not a database" not in message else sqlite3.DatabaseError(message)
    text, choices = diagnose(tmp_path / "x.sqlite3", exc)
    assert words in text and "quit" in choices and "new" in choices


def test_a_store_that_fails_to_open_read_only_is_met_with_a_new_file(tmp_path, monkeypatch):
    """Root can write anywhere: inject the read-only failure for the file at ``path``."""
    import app.shell.startup.db_open as db_open

    path = tmp_path / "logitscope.sqlite3"
    Store(path).close()
    real = db_open.Store

    def store_at(where, timeout=5.0):
        if Path(where) == path and path.exists():
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return real(where, timeout=timeout)

    monkeypatch.setattr(db_open, "Store", store_at)
    ask = Asker("retry", "new")
    store = open_store(path, ask)
    assert len(ask.asked) == 2 and "read-only" in ask.asked[0][0]
    assert store.moved_aside is not None and store.moved_aside.exists()
    store.close()


def test_the_journal_json_is_the_branch_format(store):
    """The journal's rows are step_to_dict JSON: the recovered branch reads like any other."""
    _, message = new_turn(store)
    params = SamplingParams()
    journal = StreamJournal(store.path)
    journal.token(1, message.id, "m", params, [make_step(0, params)])
    assert journal.flush()
    db = sqlite3.connect(str(store.path))
    (text,) = db.execute("SELECT step FROM live_steps").fetchone()
    db.close()
    assert json.loads(text)["v"] == CODEC_VERSION
    journal.close()


def test_a_reply_whose_conversation_is_deleted_mid_stream_is_let_go(store):
    conversation, message = new_turn(store)
    params = SamplingParams()
    errors = []
    journal = StreamJournal(store.path, on_error=errors.append)
    steps = [make_step(i, params) for i in range(3)]
    journal.token(1, message.id, "tiny", params, steps)
    assert journal.flush()
    store.writes.delete_conversation(conversation.id)
    steps.append(make_step(3, params))
    journal.token(1, message.id, "tiny", params, steps)
    assert journal.flush() and errors == [] and journal_rows(store.path) == (0, 0)
    journal.close()
