"""The requests Logitscope served over the OpenAI API, kept with the conversations they
became (the app's Served list, issue 38; schema 8's ``served`` table).

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServedRow:
    id: int
    conversation_id: int
    message_id: int
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
    ) -> ServedRow:
        now = time.time()
        text = json.dumps(dict(sent), default=str)  # what JSON carried, so always encodable
        cur = self.db.execute(
            "INSERT INTO served(conversation_id, message_id, client, endpoint, model, sent, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (conversation_id, message_id, client, endpoint, model, text, now),
        )
        self.db.commit()
        return ServedRow(cur.lastrowid, conversation_id, message_id, client, endpoint, model, now, json.loads(text))

    def finish(self, served_id: int, finish_reason: str, tokens: int) -> None:
        self.db.execute(
            "UPDATE served SET finish_reason = ?, tokens = ? WHERE id = ?", (finish_reason, tokens, served_id)
        )
        self.db.commit()

    def recent(self, limit: int = 500) -> list[ServedRow]:
        """The ``limit`` requests served last, the newest first (a deleted conversation's go
        with it)."""
        rows = self.db.execute(
            "SELECT id, conversation_id, message_id, client, endpoint, model, created_at, sent, finish_reason, tokens"
            " FROM served ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [ServedRow(*row[:7], _settings(row[7]), row[8], row[9]) for row in rows]


def _settings(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
