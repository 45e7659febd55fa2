"""The store's SQLite schema and its migrations (``PRAGMA user_version``).

``MIGRATIONS[v]`` turns a version-v database into version v + 1; :class:`app.store.store.Store`
runs them one at a time, each in its own transaction, after copying the file to
``<name>.v<old version>.bak`` (:func:`backup_path`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from app.store.serialize import step_from_dict, step_to_dict
from engine.api.events import FinishReason

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL DEFAULT '',
    after_message INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    after_branch INTEGER REFERENCES branches(id) ON DELETE CASCADE,
    active_branch INTEGER,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS branches (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    finish_reason TEXT,
    model TEXT NOT NULL,
    params TEXT NOT NULL,
    steps TEXT NOT NULL,
    created_at REAL NOT NULL,
    model_source TEXT,
    precision TEXT,
    backend TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id);
CREATE INDEX IF NOT EXISTS branches_by_message ON branches(message_id);
"""
COMPARE_SCHEMA = """
CREATE TABLE IF NOT EXISTS compare_runs (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    prefix_tokens INTEGER NOT NULL,
    columns TEXT NOT NULL,
    divergence TEXT NOT NULL,
    kept INTEGER,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS compare_runs_by_message ON compare_runs(message_id);
"""
JOURNAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS live_replies (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    params TEXT NOT NULL,
    branch INTEGER,
    created_at REAL NOT NULL,
    model_source TEXT,
    precision TEXT,
    backend TEXT
);
CREATE TABLE IF NOT EXISTS live_steps (
    reply INTEGER NOT NULL REFERENCES live_replies(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    step TEXT NOT NULL,
    PRIMARY KEY (reply, idx)
);
"""
SERVED_SCHEMA = """
CREATE TABLE IF NOT EXISTS served (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER REFERENCES conversations(id) ON DELETE CASCADE,
    message_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    client TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    model TEXT NOT NULL,
    sent TEXT NOT NULL,
    messages TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    finish_reason TEXT,
    tokens INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
"""
SERVED_V8_COLUMNS = (
    "id, conversation_id, message_id, client, endpoint, model, sent, messages, created_at, finish_reason, tokens"
)
SCHEMA_VERSION = 9
"""1: the first release (it left ``user_version`` at 0), token steps in format 1.
2: token steps keyed by stage name (token records of version 2; each record names its
version, :mod:`engine.api.codec` reads every one, so later record versions need no migration).
3: compare runs (``compare_runs``: columns as ``[{"label", "params", "branch"}]``, the
divergence series as JSON, the kept column or NULL).
4: the stream journal (``live_replies``, ``live_steps``): the steps of replies being
written, one row per token, written while they stream (``app.store.stream``); a reply's
rows go once it is saved as a branch, and rows left by a crash become an "interrupted"
branch at the next start (:meth:`app.store.writes.StoreWrites.recover_interrupted`).
5: where each reply's model was loaded from (``model_source`` on ``branches`` and
``live_replies``: a path, "default", a repo id or a server's address; NULL for replies
saved before).
6: the precision each reply was computed in (``precision`` on ``branches`` and
``live_replies``: ``float32``, ``float16`` or ``bfloat16``; NULL when not known:
replies saved before, and a server's, which does not say).
7: the backend each reply came from (``backend`` on ``branches`` and ``live_replies``:
``local``, or ``remote:<server kind>:<stage>:detected|set`` for an OpenAI-compatible server:
the stage its numbers are and whether it was detected from the server's kind or set (or
assumed) in Connect…; NULL for replies saved before, which the views tell apart by their
steps (``app.model.reply_origin``)).
8: requests served over the OpenAI API (``served``): each one's conversation and
reply message, its client, endpoint (``chat`` or ``completion``) and model, its settings as
the client sent them (JSON), its messages exactly as sent (JSON: what the model is sent again
for its reply), when it came, and how it ended (NULL while it is written, or after a crash)
with its token count (``app.store.served_log``).
9: a served request refused with a 400 is listed too: ``served`` rows
without a conversation or message (NULL), their ``error`` the message the client got,
``finish_reason`` ``refused``."""
INTERRUPTED = FinishReason.INTERRUPTED


class NewerSchemaError(RuntimeError):
    """The file was written by a newer Logitscope."""


def _steps_v1_to_v2(db: sqlite3.Connection) -> None:
    """Rewrite every branch's token steps from version 1 to the codec's current version."""
    rows = db.execute("SELECT id, steps FROM branches").fetchall()
    for branch_id, text in rows:
        steps = [step_to_dict(step_from_dict(d)) for d in json.loads(text)]
        db.execute("UPDATE branches SET steps = ? WHERE id = ?", (json.dumps(steps), branch_id))


def _add_compare_runs(db: sqlite3.Connection) -> None:
    for statement in COMPARE_SCHEMA.strip().split(";"):
        if statement.strip():
            db.execute(statement)


def _add_journal(db: sqlite3.Connection) -> None:
    for statement in JOURNAL_SCHEMA.strip().split(";"):
        if statement.strip():
            db.execute(statement)


def _add_column(db: sqlite3.Connection, name: str) -> None:
    for table in ("branches", "live_replies"):  # an older file got live_replies from today's schema
        if name not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} TEXT")


def _add_model_source(db: sqlite3.Connection) -> None:
    _add_column(db, "model_source")


def _add_precision(db: sqlite3.Connection) -> None:
    _add_column(db, "precision")


def _add_backend(db: sqlite3.Connection) -> None:
    _add_column(db, "backend")


def _add_served(db: sqlite3.Connection) -> None:
    db.execute(SERVED_SCHEMA)


def _served_refusals(db: sqlite3.Connection) -> None:
    """Rebuilt (SQLite cannot drop a NOT NULL): conversation and message may be NULL, and an error."""
    db.execute("ALTER TABLE served RENAME TO served_v8")
    db.execute(SERVED_SCHEMA)
    db.execute(f"INSERT INTO served({SERVED_V8_COLUMNS}) SELECT {SERVED_V8_COLUMNS} FROM served_v8")
    db.execute("DROP TABLE served_v8")


# MIGRATIONS[v] turns a version-v database into version v + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _steps_v1_to_v2,
    2: _add_compare_runs,
    3: _add_journal,
    4: _add_model_source,
    5: _add_precision,
    6: _add_backend,
    7: _add_served,
    8: _served_refusals,
}


def has_tables(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'branches'").fetchone() is not None


def backup_path(path: Path, version: int) -> Path:
    return path.with_name(f"{path.name}.v{version}.bak")
