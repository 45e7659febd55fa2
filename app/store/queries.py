"""The store's reads: conversations listed and loaded, a message's branches, the thread shown
(each assistant message's active branch followed), and a conversation's compare runs.

:class:`StoreQueries` is :class:`app.store.store.Store`'s ``reads``, over the store's
connection; its writes are :mod:`app.store.writes`. Nothing here changes the file.
"""

from __future__ import annotations

import json
import sqlite3

from app.store.compare_runs import CompareColumn, CompareRun, DivergenceSeries, branch_key
from app.store.rows import Branch, Conversation, ConversationSummary, Message
from app.store.serialize import steps_from_json
from engine.api.params import SamplingParams


class StoreQueries:
    """Reads through ``db`` (the store's SQLite connection)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def conversations(self) -> list[Conversation]:
        rows = self.db.execute("SELECT id, title, system_prompt FROM conversations ORDER BY updated_at DESC")
        return [Conversation(*row) for row in rows]

    def conversation_list(self, limit: int = 30) -> list[ConversationSummary]:
        """The ``limit`` conversations written to last, each with what tells it apart from
        another of the same title (``json_array_length`` counts a reply's steps in SQLite,
        without decoding them)."""
        rows = self.db.execute(
            "SELECT c.id, c.title, c.updated_at,"
            " (SELECT b.model FROM messages m JOIN branches b ON b.message_id = m.id"
            "  WHERE m.conversation_id = c.id ORDER BY b.id DESC LIMIT 1),"
            " (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id AND m.role = 'user'),"
            " (SELECT COALESCE(SUM(json_array_length(b.steps)), 0) FROM messages m"
            "  JOIN branches b ON b.id = m.active_branch WHERE m.conversation_id = c.id)"
            " FROM conversations c ORDER BY c.updated_at DESC, c.id DESC LIMIT ?",
            (limit,),
        )
        return [ConversationSummary(*row) for row in rows]

    def conversation(self, conversation_id: int) -> Conversation | None:
        row = self.db.execute(
            "SELECT id, title, system_prompt FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        return Conversation(*row) if row else None

    def conversation_of_branch(self, branch_id: int) -> int | None:
        row = self.db.execute(
            "SELECT m.conversation_id FROM branches b JOIN messages m ON m.id = b.message_id WHERE b.id = ?",
            (branch_id,),
        ).fetchone()
        return row[0] if row else None

    def branches(self, message_id: int) -> list[Branch]:
        rows = self.db.execute(
            "SELECT id, text, finish_reason, model, params, steps, model_source, precision, backend FROM branches"
            " WHERE message_id = ? ORDER BY id",
            (message_id,),
        )
        return [
            Branch(bid, text, reason, model, SamplingParams.from_dict(json.loads(p)), steps_from_json(s), *origin)
            for bid, text, reason, model, p, s, *origin in rows
        ]

    def thread(self, conversation_id: int, after_branch: int | None = None) -> list[Message]:
        """The messages shown: follow each assistant message's active branch (from the
        start, or from the messages answering ``after_branch`` on)."""
        shown: list[Message] = []
        while True:
            row = self.db.execute(
                "SELECT id, content FROM messages WHERE conversation_id = ? AND role = 'user' "
                "AND after_branch IS ? ORDER BY id DESC LIMIT 1",
                (conversation_id, after_branch),
            ).fetchone()
            if row is None:
                return shown
            shown.append(Message(row[0], "user", row[1]))
            reply = self.db.execute(
                "SELECT id, active_branch FROM messages WHERE after_message = ? ORDER BY id DESC LIMIT 1",
                (row[0],),
            ).fetchone()
            if reply is None:
                return shown
            message = Message(reply[0], "assistant", branches=self.branches(reply[0]))
            ids = [b.id for b in message.branches]
            message.active = ids.index(reply[1]) if reply[1] in ids else max(0, len(ids) - 1)
            shown.append(message)
            if message.branch is None:
                return shown
            after_branch = message.branch.id

    def compare_runs(self, conversation_id: int) -> list[CompareRun]:
        rows = self.db.execute(
            "SELECT r.id, r.message_id, r.prefix_tokens, r.columns, r.divergence, r.kept FROM compare_runs r"
            " JOIN messages m ON m.id = r.message_id WHERE m.conversation_id = ? ORDER BY r.id",
            (conversation_id,),
        )
        runs = []
        for run_id, message_id, prefix_tokens, columns, divergence, kept in rows:
            cols = [
                CompareColumn(c["label"], SamplingParams.from_dict(c["params"]), branch_key(int(c["branch"])))
                for c in json.loads(columns)
            ]
            run = CompareRun(message_id, cols, prefix_tokens, kept=kept, id=run_id)
            run.divergence = DivergenceSeries.from_json(divergence)
            runs.append(run)
        return runs
