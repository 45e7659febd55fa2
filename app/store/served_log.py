"""The requests Logitscope served over the OpenAI API, kept with the conversations they
became (the app's Served list; schema 8's ``served`` table).

A request's conversation, its messages and its reply are ordinary rows (``app.store.writes``),
so a served reply opens, branches, replays and exports like any other; this table adds what
the list shows and a conversation cannot say: who sent it, to which endpoint, under which
model, the settings as the client sent them, and how it ended. :class:`ServedLog` is the
store's ``served``, over its connection.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServedRow:
    id: int
    conversation_id: int | None
    """None: a request refused with a 400, which became no conversation."""
    message_id: int | None
    client: str
    endpoint: str
    """``chat`` (``/v1/chat/completions``) or ``completion`` (``/v1/completions``)."""
    model: str
    created_at: float
    sent: dict[str, Any] = field(default_factory=dict)
    """The settings as the client sent them (its body without the conversation or prompt)."""
    finish_reason: str | None = None
    """How it ended; None while it is written (or when a crash interrupted it)."""
    tokens: int = 0
    error: str | None = None
    """A refused request's error, as its client got it."""


class ServedLog:
    """The ``served`` table's reads and writes, each committed before it returns."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def add(
        self,
        conversation_id: int,
        message_id: int,
        client: str,
        endpoint: str,
        model: str,
        sent: Mapping[str, Any],
        messages: Sequence[Mapping[str, str]] = (),
    ) -> ServedRow:
        """A request arrived; ``messages``: its conversation exactly as sent (a chat's)."""
        now = time.time()
        text = json.dumps(dict(sent), default=str)  # what JSON carried, so always encodable
        cur = self.db.execute(
            "INSERT INTO served(conversation_id, message_id, client, endpoint, model, sent, messages, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (conversation_id, message_id, client, endpoint, model, text, json.dumps([dict(m) for m in messages]), now),
        )
        self.db.commit()
        return ServedRow(cur.lastrowid, conversation_id, message_id, client, endpoint, model, now, json.loads(text))

    def add_refused(
        self, client: str, endpoint: str, model: str, sent: Mapping[str, Any], messages: Sequence[Any], error: str
    ) -> ServedRow:
        """A request refused with a 400 (``REFUSED``), kept with its error and no conversation."""
        now = time.time()
        text = json.dumps(dict(sent), default=str)
        cur = self.db.execute(
            "INSERT INTO served(client, endpoint, model, sent, messages, created_at, finish_reason, error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (client, endpoint, model, text, json.dumps(list(messages), default=str), now, REFUSED, error),
        )
        self.db.commit()
        row = ServedRow(cur.lastrowid, None, None, client, endpoint, model, now, json.loads(text), REFUSED)
        row.error = error
        return row

    def finish(self, served_id: int, finish_reason: str, tokens: int) -> None:
        self.db.execute(
            "UPDATE served SET finish_reason = ?, tokens = ? WHERE id = ?", (finish_reason, tokens, served_id)
        )
        self.db.commit()

    def next_id(self) -> int:
        """The id the next request will have at least (rows from it on are this run's)."""
        return self.db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM served").fetchone()[0]

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM served").fetchone()[0]

    def recent(self, limit: int = 500) -> list[ServedRow]:
        """The ``limit`` requests served last, the newest first (a deleted conversation's go
        with it)."""
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM served ORDER BY id DESC LIMIT ?", (limit,))
        return [_row(row) for row in rows]

    def of_conversation(self, conversation_id: int) -> ServedRow | None:
        """The request a conversation was made for, or None (one of the person's own)."""
        row = self.db.execute(f"SELECT {_COLUMNS} FROM served WHERE conversation_id = ?", (conversation_id,)).fetchone()
        return _row(row) if row else None

    def messages_of(self, served_id: int) -> tuple[dict[str, str], ...]:
        """The messages the request's client sent, exactly ((): a completion's, or unreadable)."""
        row = self.db.execute("SELECT messages FROM served WHERE id = ?", (served_id,)).fetchone()
        value = _loaded(row[0] if row else "[]", [])
        ok = all(isinstance(m, dict) for m in value)
        return tuple({str(k): str(v) for k, v in m.items()} for m in value) if ok else ()


_COLUMNS = "id, conversation_id, message_id, client, endpoint, model, created_at, sent, finish_reason, tokens, error"
REFUSED = "refused"
"""How a request refused with a 400 ended (``ServedRow.finish_reason``)."""


def _row(row: tuple) -> ServedRow:
    return ServedRow(*row[:7], _loaded(row[7], {}), row[8], row[9], row[10])


def _loaded(text: str, empty: Any) -> Any:
    """``text``'s JSON when it is of ``empty``'s type, else ``empty`` (a file edited by hand)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return empty
    return value if isinstance(value, type(empty)) else empty
