"""Conversations in SQLite (WAL): messages, reply branches, and every token's inspection data.

A conversation is a chain of turns. Each assistant message has one or more
branches (regenerations and picked-token continuations); a user message that
follows an assistant reply belongs to the branch it answered, so switching a
branch switches the rest of the conversation with it.

The schema version is ``PRAGMA user_version``; ``MIGRATIONS`` bring an older file
up to ``SCHEMA_VERSION`` one step at a time, each in its own transaction, after a
copy of the file is written beside it (``<name>.v<old version>.bak``).

This module holds :class:`Store` itself: the connection, opening and migrating the file,
and the models it was told about. Its writes are ``store.writes``
(:class:`app.store.writes.StoreWrites`), its reads ``store.reads``
(:class:`app.store.queries.StoreQueries`), two objects over the one connection; the rows
both hand out are :mod:`app.store.rows`, imported from here, as are the schema's names
callers use.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.store.queries import StoreQueries
from app.store.rows import Branch, Conversation, ConversationSummary, Message
from app.store.schema import (
    COMPARE_SCHEMA,
    INTERRUPTED,
    JOURNAL_SCHEMA,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    SERVED_SCHEMA,
    NewerSchemaError,
    backup_path,
    has_tables,
)
from app.store.served_log import ServedLog
from app.store.writes import StoreWrites

__all__ = [
    "INTERRUPTED",
    "SCHEMA_VERSION",
    "Branch",
    "Conversation",
    "ConversationSummary",
    "Message",
    "NewerSchemaError",
    "Store",
    "backup_path",
]


class Store:
    def __init__(self, path: str | Path, timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.moved_aside: Path | None = None  # set by app.shell.startup.db_open when the old file was moved
        self.opened_instead = False
        self.model_sources: dict[str, str] = {}  # model name -> where it was loaded from (note_model)
        self.model_precisions: dict[str, str] = {}  # model name -> what it computes in (note_model)
        self.model_backends: dict[str, str] = {}  # model name -> where it runs (note_model)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=timeout)
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.migrated_from: int | None = None
            self._open_schema()
            self._check_writable()
        except BaseException:
            self.db.close()
            raise
        self.reads = StoreQueries(self.db)
        """Conversations listed and loaded, branches, the thread shown, compare runs."""
        self.writes = StoreWrites(self.db, self.model_sources, self.model_precisions, self.model_backends)
        """Conversations made and changed, messages, branches and compare runs saved, the
        stream journal's leftovers recovered."""
        self.served = ServedLog(self.db)
        """The requests served over the OpenAI API (the Served list)."""

    def _open_schema(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            if not has_tables(self.db):
                self.db.executescript(SCHEMA + COMPARE_SCHEMA + JOURNAL_SCHEMA + SERVED_SCHEMA)
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self.db.commit()
                return
            version = 1  # the first release had these tables and left user_version at 0
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(
                f"{self.path} was written by a newer Logitscope (schema {version}; this one reads up to "
                f"{SCHEMA_VERSION})."
            )
        if version == SCHEMA_VERSION:
            return
        # A consistent copy even in WAL mode, before anything is rewritten.
        with sqlite3.connect(str(backup_path(self.path, version))) as copy:
            self.db.backup(copy)
        copy.close()
        self.migrated_from = version
        while version < SCHEMA_VERSION:
            # One transaction per step: a failure leaves the file at the last finished version.
            self.db.execute("BEGIN")
            try:
                MIGRATIONS[version](self.db)
                self.db.execute(f"PRAGMA user_version = {version + 1}")
            except BaseException:
                self.db.rollback()
                raise
            self.db.commit()
            version += 1

    def _check_writable(self) -> None:
        """A read-only file opens (SQLite falls back to reading): write its own version back
        so that it fails here, where the app can offer a way out, not at the first reply."""
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        self.db.execute(f"PRAGMA user_version = {int(version)}")
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    def note_model(self, name: str, source: str, precision: str = "", backend: str = "") -> None:
        """Model ``name`` was loaded from ``source``, computes in ``precision`` ("" when not
        known: a server) on ``backend`` (``app.model.reply_origin.backend_of``; "" when not
        known): replies of ``name`` saved from now on record all three (``model_source``,
        ``precision``, ``backend``), and so does the stream journal, which reads these maps."""
        self.model_sources[name] = source
        if backend:
            self.model_backends[name] = backend
        else:
            self.model_backends.pop(name, None)
        if precision:
            self.model_precisions[name] = precision
        else:
            self.model_precisions.pop(name, None)

    def integrity(self) -> str:
        """``PRAGMA integrity_check``: "ok", or what is wrong."""
        return "; ".join(row[0] for row in self.db.execute("PRAGMA integrity_check"))
