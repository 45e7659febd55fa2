"""Where the app's served requests are written: off the GUI thread (no Qt).

A burst of requests to the app's server made every request a conversation through several
SQLite commits on the GUI thread, and the window froze while they were made.
:class:`ServedWriter` runs the store's work for served requests — a request's conversation
and row, its end, the retention's pruning, *Delete served requests…* — on a thread of its
own, over a connection of its own (the file is in WAL mode: the GUI's connection reads while
it writes), and hands each result back through ``post`` (the shell's queued call to the GUI
thread). :class:`InlineWriter` does the same work on the caller's thread, with the chat's
store: the model layer's tests, and an app that does not serve.

What is written is the functions below, each taking the store it runs on:
:func:`store_request`, :func:`finish_request`, :func:`prune_served` (the retention: the
newest ``keep`` requests stay) and :func:`delete_served` (a batch of *Delete served
requests…*). A request being written, one that reached the writer but not yet the GUI, and
the open conversation are never pruned or deleted.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from app.store.served_log import ServedRow
from app.store.store import Message, Store
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.serve.request_fields import ServedRequest
from engine.serve.seam import Refused

CLIENT = "client"
"""The model and backend recorded for an assistant turn the client sent (its text, no steps)."""
KEEP_DEFAULT = 500
"""Served requests kept by default: the newest 500 (the Served list shows as many); 0 keeps all."""
DELETE_BATCH = 50
"""Requests a step of *Delete served requests…* deletes (its progress and cancel fall between)."""

Work = Callable[[Store], Any]
Then = Callable[[Any], None]


def store_request(
    store: Store, request: ServedRequest, model: str, shown: tuple[str, Sequence[tuple[str, str]]]
) -> ServedRow:
    """``request`` as a conversation (``shown``: its system prompt and turns,
    ``app.model.served.conversation_of``) and its ``served`` row; nothing is left of it when
    a write fails (the error is raised)."""
    system, turns = shown
    asked = next((text.strip() for role, text in reversed(turns) if role == "user" and text.strip()), "")
    title = asked.splitlines()[0][:60] if asked else "Served request"
    conversation = store.writes.new_conversation(system, title)
    try:
        message = _write_turns(store, conversation.id, turns)
        return store.served.add(
            conversation.id,
            message.id,
            request.client,
            "chat" if request.chat else "completion",
            model,
            request.sent,
            request.messages,
        )
    except BaseException:
        store.db.rollback()
        store.writes.delete_conversation(conversation.id)
        raise


def _write_turns(store: Store, conversation_id: int, turns: Sequence[tuple[str, str]]) -> Message:
    """The client's turns as messages (its assistant turns branches of their text); the
    reply's message last."""
    writes = store.writes
    after_branch, user = None, None
    for role, content in turns:
        if role == "user":
            user = writes.add_user_message(conversation_id, content, after_branch)
            continue
        said = writes.add_assistant_message(conversation_id, user.id)
        branch = writes.add_branch(said.id, [], content, None, CLIENT, SamplingParams(), "[]", backend=CLIENT)
        writes.set_active_branch(said.id, branch.id)
        after_branch = branch.id
    return writes.add_assistant_message(conversation_id, user.id)


def save_branch(
    store: Store, message_id: int, steps: Sequence[TokenStep], finished: Finished, model: str, params: SamplingParams
) -> int:
    """A served reply that ended as its message's branch, its steps serialized here; its id."""
    branch = store.writes.add_branch(message_id, list(steps), finished.text, finished.finish_reason, model, params)
    return branch.id


def store_refusal(store: Store, refused: Refused, model: str) -> ServedRow:
    """A request refused with a 400 before it reached the engine, as a row of its own."""
    body = refused.body if isinstance(refused.body, dict) else {}
    key = "messages" if refused.chat else "prompt"
    sent = {k: v for k, v in body.items() if k not in ("messages", "prompt", "stream")}
    said = body.get(key)
    messages = said if isinstance(said, list) else ([] if said is None else [said])
    where = f" ({refused.param})" if refused.param and refused.param not in refused.message else ""
    return store.served.add_refused(
        refused.client, "chat" if refused.chat else "completion", model, sent, messages, refused.message + where
    )


def refuse_stored(store: Store, row: ServedRow, error: str) -> ServedRow:
    """A stored request the engine refused when it started it: its conversation goes, and it
    stays listed as a refused request with ``error``."""
    messages = store.served.messages_of(row.id)
    if row.conversation_id is not None:
        store.writes.delete_conversation(row.conversation_id)  # its row goes with it
    return store.served.add_refused(row.client, row.endpoint, row.model, row.sent, messages, error)


def finish_request(store: Store, served_id: int, finish_reason: str, tokens: int) -> None:
    store.served.finish(served_id, finish_reason, tokens)


def delete_request(store: Store, conversation_id: int) -> None:
    """A request refused after it was stored (or given up by its client): its conversation goes."""
    store.writes.delete_conversation(conversation_id)


def _removable(protected: Collection[int], first_live_id: int) -> str:
    """The rows that may go: ended, or left unended by an earlier run (interrupted); not a
    conversation in ``protected``."""
    ids = ",".join(str(int(c)) for c in protected) or "-1"  # NOT IN (NULL) would match nothing
    return (
        f"(finish_reason IS NOT NULL OR id < {int(first_live_id)})"
        f" AND (conversation_id IS NULL OR conversation_id NOT IN ({ids}))"
    )


def prune_served(store: Store, keep: int, protected: Collection[int], first_live_id: int) -> list[int]:
    """The retention: every served request but the newest ``keep`` goes with its conversation
    (``keep`` 0: none goes), but those in ``protected`` (conversation ids) and those of this
    run that have not ended (from ``first_live_id`` on). The ids of the rows that went."""
    if keep <= 0:
        return []
    rows = store.db.execute(
        "SELECT id, conversation_id FROM served WHERE id NOT IN (SELECT id FROM served ORDER BY id DESC LIMIT ?)"
        f" AND {_removable(protected, first_live_id)}",
        (keep,),
    ).fetchall()
    return _delete_rows(store, rows)


def delete_served(store: Store, protected: Collection[int], first_live_id: int, limit: int) -> tuple[list[int], int]:
    """*Delete served requests…*, one step: the oldest ``limit`` requests that may go (see
    :func:`prune_served`) go; (the ids that went, how many may still go)."""
    where = _removable(protected, first_live_id)
    rows = store.db.execute(f"SELECT id, conversation_id FROM served WHERE {where} ORDER BY id LIMIT ?", (limit,))
    gone = _delete_rows(store, rows.fetchall())
    (left,) = store.db.execute(f"SELECT COUNT(*) FROM served WHERE {where}").fetchone()
    return gone, left


def count_deletable(store: Store, protected: Collection[int], first_live_id: int) -> int:
    (count,) = store.db.execute(f"SELECT COUNT(*) FROM served WHERE {_removable(protected, first_live_id)}").fetchone()
    return count


def _delete_rows(store: Store, rows: Sequence[tuple[int, int | None]]) -> list[int]:
    """Each row with its conversation (a refused request has none), in one transaction."""
    if not rows:
        return []
    with store.db:
        store.db.executemany("DELETE FROM conversations WHERE id = ?", [(c,) for _, c in rows if c is not None])
        store.db.executemany("DELETE FROM served WHERE id = ?", [(r,) for r, _ in rows])
    return [row_id for row_id, _ in rows]


class InlineWriter:
    """The writes on the caller's thread, with ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def submit(self, work: Work, then: Then | None = None) -> None:
        try:
            result = work(self.store)
        except Exception as exc:  # noqa: BLE001 - handed to ``then``, as the thread's writer does
            result = exc
        if then is not None:
            then(result)

    def wait(self, timeout: float | None = None) -> bool:
        """Every write submitted is done (nothing to wait for here)."""
        return True

    def close(self) -> None:
        """Nothing of its own to close: the store is the chat's."""


class ServedWriter:
    """The writes on a thread of its own, over a connection of its own to ``path``, in the
    order submitted; each result (or exception) handed to its ``then`` through ``post``."""

    def __init__(self, path: str | Path, post: Callable[[Callable[[], None]], None], like: Store | None = None) -> None:
        """``like``: the GUI's store, whose models (``Store.note_model``) a branch saved here
        records as one saved there does."""
        self._post = post
        self._like = like
        self._jobs: queue.SimpleQueue[tuple[Work, Then | None, threading.Event | None] | None] = queue.SimpleQueue()
        self._opened = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(Path(path),), name="logitscope-served", daemon=True)
        self._thread.start()
        self._opened.wait()
        if self._failure is not None:
            raise self._failure

    def submit(self, work: Work, then: Then | None = None) -> None:
        self._jobs.put((work, then, None))

    def wait(self, timeout: float | None = None) -> bool:
        """Every write submitted before is done (its ``then`` posted); False on ``timeout``."""
        done = threading.Event()
        self._jobs.put((lambda _store: None, None, done))
        return done.wait(timeout)

    def close(self) -> None:
        """The writes submitted are done; then the connection closes."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def _run(self, path: Path) -> None:
        try:
            store = Store(path)
        except BaseException as exc:  # noqa: BLE001 - raised in the constructor's thread
            self._failure = exc
            self._opened.set()
            return
        if self._like is not None:  # the same maps: a model noted there is noted here
            store.writes.model_sources = self._like.model_sources
            store.writes.model_precisions = self._like.model_precisions
            store.writes.model_backends = self._like.model_backends
        self._opened.set()
        try:
            while (job := self._jobs.get()) is not None:
                work, then, done = job
                try:
                    result = work(store)
                except Exception as exc:  # noqa: BLE001 - the GUI's ``then`` says what failed
                    result = exc
                if then is not None:
                    self._post(lambda then=then, result=result: then(result))
                if done is not None:
                    done.set()
        finally:
            store.close()
