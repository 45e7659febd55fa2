"""What the stream journal holds, read without changing it (Qt-free).

A reply being written is in ``live_replies`` / ``live_steps`` (:mod:`app.store.stream`)
until it is saved as a branch; after a crash or ``kill -9`` it stays there until the next
start turns it into a branch marked "interrupted"
(:meth:`app.store.writes.StoreWrites.recover_interrupted`). Exports read the same rows, the same
way, so a reply that no window has recovered yet is exported too (``python -m app export``
right after the crash): :func:`journal_replies` says, for each reply left in the journal,
whether its steps belong to a branch already saved or make an interrupted branch of their own.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class JournalReply:
    """One reply left in the journal and where its steps belong."""

    live_id: int
    message_id: int
    model: str
    params: str
    """``SamplingParams.to_dict()`` as JSON, as branches hold it."""
    created: float
    source: str | None
    precision: str | None
    steps: list[str]
    """The steps as the store's records (JSON), in order."""
    fills: int | None
    """A branch saved before the end whose steps are not written yet: these are its steps;
    None: the reply was never saved (interrupted), or it has no steps."""
    backend: str | None = None
    """Where it was being computed (``local``, ``remote:…``), as branches hold it."""

    @property
    def steps_json(self) -> str:
        return "[" + ", ".join(self.steps) + "]"

    @property
    def text(self) -> str:
        return "".join(json.loads(step)["text"] for step in self.steps)

    @property
    def interrupted(self) -> bool:
        """Never saved as a branch: it becomes one, marked "interrupted"."""
        return self.fills is None and bool(self.steps)


def journal_replies(db: sqlite3.Connection, conversation_id: int | None = None) -> list[JournalReply]:
    """Every reply left in the journal (of one conversation, or of all), oldest first."""
    query = (
        "SELECT l.id, l.message_id, l.model, l.params, l.branch, l.created_at, l.model_source, l.precision,"
        " l.backend FROM live_replies l"
    )
    args: tuple = ()
    if conversation_id is not None:
        query += " JOIN messages m ON m.id = l.message_id WHERE m.conversation_id = ?"
        args = (conversation_id,)
    out = []
    for live_id, message_id, model, params, branch, created, source, precision, backend in db.execute(
        query + " ORDER BY l.id", args
    ).fetchall():
        steps = [r[0] for r in db.execute("SELECT step FROM live_steps WHERE reply = ? ORDER BY idx", (live_id,))]
        fills = branch
        if fills is None and steps:
            fills = _unwritten_branch(db, message_id, created)
        reply = JournalReply(live_id, message_id, model, params, created, source, precision, steps, fills, backend)
        out.append(reply)
    return out


def _unwritten_branch(db: sqlite3.Connection, message_id: int, since: float) -> int | None:
    """A branch of the message saved after the reply began whose steps are not written yet."""
    row = db.execute(
        "SELECT id FROM branches WHERE message_id = ? AND steps = '[]' AND created_at >= ? ORDER BY id LIMIT 1",
        (message_id, since),
    ).fetchone()
    return row[0] if row else None
