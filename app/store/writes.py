"""The store's writes: conversations made, renamed and deleted, messages and reply branches
saved, compare runs saved, and the stream journal's leftovers turned into branches at start.

:class:`StoreWrites` is :class:`app.store.store.Store`'s ``writes``, over the store's
connection; its reads are :mod:`app.store.queries`. Each write commits (or is one transaction) before it returns;
the stream journal's writer thread (:mod:`app.store.stream`) writes its own rows with its
own connection, and :meth:`StoreWrites.recover_interrupted` is what reads them back.
"""

from __future__ import annotations

import json
import sqlite3
import time

from app.store.compare_runs import CompareColumn, DivergenceSeries
from app.store.journal_read import journal_replies
from app.store.rows import Branch, Conversation, Message
from app.store.schema import INTERRUPTED
from app.store.serialize import steps_to_json
from engine.api.events import TokenStep
from engine.api.params import SamplingParams


class StoreWrites:
    """Writes through ``db`` (the store's SQLite connection); the stream journal's leftovers
    are recorded with the models the store was told about (``model_sources``,
    ``model_precisions``, ``model_backends``: :meth:`app.store.store.Store.note_model`'s
    maps, read when a write needs them)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        model_sources: dict[str, str],
        model_precisions: dict[str, str],
        model_backends: dict[str, str],
    ) -> None:
        self.db = db
        self.model_sources = model_sources
        self.model_precisions = model_precisions
        self.model_backends = model_backends

    # The stream journal ------------------------------------------------------------------

    def recover_interrupted(self) -> list[int]:
        """Turn what the stream journal holds into branches; call once at start, before any
        reply is written. A reply that was being written (the app stopped mid-reply) becomes
        a branch marked ``"interrupted"`` with every token saved, and is made its message's
        active branch; a reply already saved as a branch but whose steps were not written yet
        gets them from the journal (:func:`app.store.journal_read.journal_replies` says which,
        as exports read it). Returns the ids of the interrupted branches."""
        recovered: list[int] = []
        live = journal_replies(self.db)
        if not live:
            return recovered
        with self.db:
            for reply in live:
                if reply.fills is not None and reply.steps:
                    # Saved as a branch before the end, its steps not written yet.
                    self.db.execute(
                        "UPDATE branches SET steps = ? WHERE id = ? AND steps = '[]'", (reply.steps_json, reply.fills)
                    )
                elif reply.interrupted:
                    cur = self.db.execute(
                        "INSERT INTO branches(message_id, text, finish_reason, model, params, steps, created_at,"
                        " model_source, precision, backend) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            reply.message_id,
                            reply.text,
                            INTERRUPTED,
                            reply.model,
                            reply.params,
                            reply.steps_json,
                            reply.created,
                            reply.source,
                            reply.precision,
                            reply.backend,
                        ),
                    )
                    self.db.execute(
                        "UPDATE messages SET active_branch = ? WHERE id = ?", (cur.lastrowid, reply.message_id)
                    )
                    recovered.append(cur.lastrowid)
                self.db.execute("DELETE FROM live_replies WHERE id = ?", (reply.live_id,))
        return recovered

    # Conversations --------------------------------------------------------------

    def new_conversation(self, system_prompt: str, title: str = "New chat") -> Conversation:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO conversations(title, system_prompt, created_at, updated_at) VALUES (?, ?, ?, ?)",
            (title, system_prompt, now, now),
        )
        self.db.commit()
        return Conversation(cur.lastrowid, title, system_prompt)

    def update_conversation(
        self, conversation_id: int, *, title: str | None = None, system_prompt: str | None = None
    ) -> None:
        if title is not None:
            self.db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))
        if system_prompt is not None:
            self.db.execute(
                "UPDATE conversations SET system_prompt = ? WHERE id = ?",
                (system_prompt, conversation_id),
            )
        self._touch(conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        self.db.commit()

    def _touch(self, conversation_id: int) -> None:
        self.db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (time.time(), conversation_id))
        self.db.commit()

    # Messages and branches ----------------------------------------------------------

    def add_user_message(self, conversation_id: int, content: str, after_branch: int | None) -> Message:
        cur = self.db.execute(
            "INSERT INTO messages(conversation_id, role, content, after_branch, created_at) "
            "VALUES (?, 'user', ?, ?, ?)",
            (conversation_id, content, after_branch, time.time()),
        )
        self._touch(conversation_id)
        return Message(cur.lastrowid, "user", content)

    def add_assistant_message(self, conversation_id: int, after_message: int) -> Message:
        cur = self.db.execute(
            "INSERT INTO messages(conversation_id, role, after_message, created_at) VALUES (?, 'assistant', ?, ?)",
            (conversation_id, after_message, time.time()),
        )
        self._touch(conversation_id)
        return Message(cur.lastrowid, "assistant")

    def add_branch(
        self,
        message_id: int,
        steps: list[TokenStep],
        text: str,
        finish_reason: str | None,
        model: str,
        params: SamplingParams,
        steps_json: str | None = None,
        model_source: str | None = None,
        precision: str | None = None,
        backend: str | None = None,
    ) -> Branch:
        """``steps_json``: the steps as saved (default: ``steps`` serialized here); ``"[]"``
        with :meth:`set_branch_steps` later writes them once serialized elsewhere.
        ``model_source``, ``precision`` and ``backend``: default, where ``model`` was last
        loaded from, what it computes in and where it runs
        (:meth:`app.store.store.Store.note_model`); an import passes its own."""
        source = model_source if model_source is not None else self.model_sources.get(model)
        # "" (an import that did not record it) stays not recorded, never today's precision.
        precision = self.model_precisions.get(model) if precision is None else (precision or None)
        backend = self.model_backends.get(model) if backend is None else (backend or None)
        cur = self.db.execute(
            "INSERT INTO branches(message_id, text, finish_reason, model, params, steps, created_at, model_source,"
            " precision, backend) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                message_id,
                text,
                finish_reason,
                model,
                json.dumps(params.to_dict()),
                steps_to_json(steps) if steps_json is None else steps_json,
                time.time(),
                source,
                precision,
                backend,
            ),
        )
        self.set_active_branch(message_id, cur.lastrowid)
        return Branch(cur.lastrowid, text, finish_reason, model, params, list(steps), source, precision, backend)

    def set_branch_steps(self, branch_id: int, steps_json: str) -> None:
        self.db.execute("UPDATE branches SET steps = ? WHERE id = ?", (steps_json, branch_id))
        self.db.commit()

    def set_active_branch(self, message_id: int, branch_id: int) -> None:
        self.db.execute("UPDATE messages SET active_branch = ? WHERE id = ?", (branch_id, message_id))
        self.db.commit()

    # Compare runs ------------------------------------------------------------------------

    def add_compare_run(
        self,
        message_id: int,
        columns: list[tuple[CompareColumn, list[TokenStep], str, str | None]],
        model: str,
        prefix_tokens: int,
        divergence: DivergenceSeries,
        steps_later: bool = False,
    ) -> tuple[int, list[Branch]]:
        """Save every column (its steps, text and finish reason) as a branch of ``message_id``
        and the run itself, in one transaction; the first column becomes the active branch.
        Returns the run's id and the branches, in column order. ``steps_later``: the steps
        are written by :meth:`set_branch_steps` once serialized elsewhere."""
        now = time.time()
        origin = (self.model_sources.get(model), self.model_precisions.get(model), self.model_backends.get(model))
        branches: list[Branch] = []
        saved: list[dict] = []
        with self.db:
            for column, steps, text, finish_reason in columns:
                params = json.dumps(column.params.to_dict())
                cur = self.db.execute(
                    "INSERT INTO branches(message_id, text, finish_reason, model, params, steps, created_at,"
                    " model_source, precision, backend) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        message_id,
                        text,
                        finish_reason,
                        model,
                        params,
                        "[]" if steps_later else steps_to_json(steps),
                        now,
                        *origin,
                    ),
                )
                branches.append(Branch(cur.lastrowid, text, finish_reason, model, column.params, list(steps), *origin))
                saved.append({"label": column.label, "params": column.params.to_dict(), "branch": cur.lastrowid})
            cur = self.db.execute(
                "INSERT INTO compare_runs(message_id, prefix_tokens, columns, divergence, kept, created_at)"
                " VALUES (?, ?, ?, ?, NULL, ?)",
                (message_id, prefix_tokens, json.dumps(saved), divergence.to_json(), now),
            )
            self.db.execute("UPDATE messages SET active_branch = ? WHERE id = ?", (branches[0].id, message_id))
        return cur.lastrowid, branches

    def set_compare_kept(self, run_id: int, kept: int | None) -> None:
        """Record the column kept as the reply (None: show the columns again)."""
        self.db.execute("UPDATE compare_runs SET kept = ? WHERE id = ?", (kept, run_id))
        self.db.commit()
