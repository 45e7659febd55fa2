"""The stream journal: a reply's tokens and their inspection data are written to SQLite
while the reply streams, not when it finishes, so a crash, a power cut or ``kill -9``
loses at most the last fraction of a second.

The GUI thread only queues work (:meth:`StreamJournal.token`, :meth:`saved`,
:meth:`dropped`: cheap, no serialization); one writer thread with its own connection
serializes the steps and writes them in WAL transactions at most ``interval`` seconds
apart (sooner once ``batch`` steps are waiting). Rows go to ``live_replies`` /
``live_steps`` (schema 4, :mod:`app.store.store`); once a reply is saved as a branch, the
writer gives the branch row its steps (unless the GUI's own write was first) and deletes
the journal rows in the same transaction. At the next start
:meth:`app.store.writes.StoreWrites.recover_interrupted` turns whatever is left into branches marked
"interrupted".

A write that fails (disk full, a read-only file, a lock held too long) is rolled back and
the batch stays in memory, already serialized; the writer retries every ``retry`` seconds
and reports the failure and the recovery through ``on_error(exc)`` / ``on_recovered()``
(called on the writer's thread: the app relays them to the GUI thread).
Qt-free (tests drive it directly).
"""

from __future__ import annotations

import contextlib
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.store.serialize import step_to_dict
from engine.api.events import TokenStep
from engine.api.params import SamplingParams


@dataclass
class _Live:
    """A reply as the writer knows it: its journal row (once written) and what is due."""

    message_id: int
    model: str
    params: str
    source: str | None = None
    precision: str | None = None
    backend: str | None = None
    row: int | None = None
    written: int = 0  # steps in live_steps
    pending: list[tuple[int, str]] = field(default_factory=list)  # (index, JSON), not yet written
    branch: int | None = None
    branch_due: bool = False
    dropped: bool = False


class StreamJournal:
    def __init__(
        self,
        path: str | Path,
        interval: float = 0.25,
        batch: int = 64,
        retry: float = 1.0,
        on_error: Callable[[BaseException], None] | None = None,
        on_recovered: Callable[[], None] | None = None,
        sources: dict[str, str] | None = None,
        precisions: dict[str, str] | None = None,
        backends: dict[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.sources = sources if sources is not None else {}  # model name -> source (Store.model_sources)
        self.precisions = precisions if precisions is not None else {}  # model name -> dtype (the same)
        self.backends = backends if backends is not None else {}  # model name -> backend (the same)
        self.interval, self.batch, self.retry = interval, batch, retry
        self.on_error, self.on_recovered = on_error, on_recovered
        self._queue: queue.Queue = queue.Queue()
        self._seen: dict[int, int] = {}  # GUI side: reply id -> steps queued so far
        self._live: dict[int, _Live] = {}  # writer side, by reply id
        self.failing: BaseException | None = None
        self.commits = 0
        self.commit_times: list[float] = []
        self._thread = threading.Thread(target=self._run, name="stream-journal", daemon=True)
        self._thread.start()

    # GUI thread ----------------------------------------------------------------------------

    def token(self, reply_id: int, message_id: int, model: str, params: SamplingParams, steps: list[TokenStep]) -> None:
        """``steps``: every step of the reply so far (a continuation's prefix included);
        the ones not queued yet are queued."""
        seen = self._seen.get(reply_id)
        if seen is None:
            origin = (self.sources.get(model), self.precisions.get(model), self.backends.get(model))
            self._put(("begin", reply_id, message_id, model, params, *origin))
            seen = 0
        if len(steps) > seen:
            self._put(("steps", reply_id, seen, steps[seen:]))
            self._seen[reply_id] = len(steps)

    def saved(self, reply_id: int, branch_id: int) -> None:
        """The reply is now branch ``branch_id``: its journal rows go once the branch has its steps."""
        if self._seen.pop(reply_id, None) is not None:
            self._put(("saved", reply_id, branch_id))

    def dropped(self, reply_id: int) -> None:
        """The reply was not kept (cancelled before its first new token)."""
        if self._seen.pop(reply_id, None) is not None:
            self._put(("dropped", reply_id))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is written (or is failing); True when written."""
        done = threading.Event()
        self._put(("flush", done))
        return done.wait(timeout) and self.failing is None

    def close(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self._put(("close",))
            self._thread.join(timeout)

    def _put(self, item: tuple) -> None:
        self._queue.put(item)

    # Writer thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        self._db: sqlite3.Connection | None = None
        first_pending: float | None = None
        waiters: list[threading.Event] = []
        closing = False
        next_try = 0.0
        while True:
            timeout = None
            if first_pending is not None:
                timeout = max(0.0, max(first_pending + self.interval, next_try) - time.monotonic())
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            if item is not None:
                kind = item[0]
                if kind == "close":
                    closing = True
                    if first_pending is None:  # one last transaction: the journal's clean-up
                        first_pending = time.monotonic()
                elif kind == "flush":
                    waiters.append(item[1])
                else:
                    self._take(item)
                    if first_pending is None:
                        first_pending = time.monotonic()
            due = first_pending is not None and (
                time.monotonic() >= first_pending + self.interval
                or sum(len(live.pending) for live in self._live.values()) >= self.batch
                or closing
                or waiters
            )
            if due and (time.monotonic() >= next_try or closing or waiters):
                if self._write():
                    first_pending = None
                    next_try = 0.0
                else:
                    next_try = time.monotonic() + self.retry
                    if closing:
                        break  # the rows written so far stay for recovery at the next start
            if first_pending is None or self.failing is not None:
                for waiter in waiters:
                    waiter.set()
                waiters.clear()
            if closing and (first_pending is None or self.failing is not None):
                break
        if self._db is not None:
            self._db.close()
        for waiter in waiters:
            waiter.set()

    def _take(self, item: tuple) -> None:
        kind, reply_id = item[0], item[1]
        if kind == "begin":
            _, _, message_id, model, params, *origin = item
            self._live[reply_id] = _Live(message_id, model, json.dumps(params.to_dict()), *origin)
            return
        live = self._live.get(reply_id)
        if live is None:
            return
        if kind == "steps":
            _, _, start, steps = item
            last, last_dict = None, None
            for offset, step in enumerate(steps):
                if last is None or (step.params is not last and step.params != last):
                    last_dict = step.params.to_dict()
                last = step.params
                live.pending.append((start + offset, json.dumps(step_to_dict(step, last_dict))))
                time.sleep(0)  # hand the interpreter back to the GUI thread between steps
        elif kind == "saved":
            live.branch, live.branch_due = item[2], True
        elif kind == "dropped":
            live.dropped = True

    def _write(self) -> bool:
        """One transaction for everything due; False (and the batch kept) when it failed."""
        try:
            if self._db is None:
                self._db = sqlite3.connect(str(self.path), timeout=2.0, check_same_thread=False)
                self._db.execute("PRAGMA foreign_keys=ON")
            self._write_once(self._db)
        except (sqlite3.Error, OSError) as exc:
            if self._db is not None:
                # A new connection for the retry: SQLite opens a file it cannot write
                # read-only and would stay so once the file is writable again.
                with contextlib.suppress(sqlite3.Error):
                    self._db.rollback()
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                self._db = None
            if self.failing is None and self.on_error is not None:
                self.on_error(exc)
            self.failing = exc
            return False
        self.commits += 1
        self.commit_times.append(time.monotonic())
        del self.commit_times[:-1000]
        # The transaction is in: forget what it wrote.
        for reply_id, live in list(self._live.items()):
            live.written += len(live.pending)
            live.pending.clear()
            live.branch_due = False
            if live.dropped:
                del self._live[reply_id]
            elif live.branch is not None:
                del self._live[reply_id]  # rows cleaned up once the branch has its steps
        if self.failing is not None:
            self.failing = None
            if self.on_recovered is not None:
                self.on_recovered()
        return True

    def _write_once(self, db: sqlite3.Connection) -> None:
        rows: dict[int, int] = {}  # the rows this transaction creates, assigned after commit
        db.execute("BEGIN IMMEDIATE")
        for reply_id, live in self._live.items():
            if (
                not live.dropped
                and db.execute("SELECT 1 FROM messages WHERE id = ?", (live.message_id,)).fetchone() is None
            ):
                live.dropped = True  # its conversation was deleted (the journal rows went with it)
            row = live.row
            if row is None:
                if live.dropped:
                    continue
                cur = db.execute(
                    "INSERT INTO live_replies(message_id, model, params, branch, created_at, model_source, precision,"
                    " backend) VALUES (?, ?, ?, NULL, ?, ?, ?, ?)",
                    (live.message_id, live.model, live.params, time.time(), live.source, live.precision, live.backend),
                )
                row = rows[reply_id] = cur.lastrowid
            if live.dropped:
                db.execute("DELETE FROM live_replies WHERE id = ?", (row,))
                continue
            if live.pending:
                db.executemany(
                    "INSERT OR REPLACE INTO live_steps(reply, idx, step) VALUES (?, ?, ?)",
                    [(row, index, text) for index, text in live.pending],
                )
            if live.branch_due:
                # The branch gets its steps here (unless the GUI's own write came first), so a
                # failing write is retried with the rest; then the journal rows are done.
                steps = [r[0] for r in db.execute("SELECT step FROM live_steps WHERE reply = ? ORDER BY idx", (row,))]
                db.execute(
                    "UPDATE branches SET steps = ? WHERE id = ? AND steps = '[]'",
                    ("[" + ", ".join(steps) + "]", live.branch),
                )
                db.execute("DELETE FROM live_replies WHERE id = ?", (row,))
        # Replies saved as branches whose steps are written: their journal rows are done.
        db.execute(
            "DELETE FROM live_replies WHERE branch IS NOT NULL AND "
            "(SELECT b.steps != '[]' FROM branches b WHERE b.id = live_replies.branch) IS NOT 0"
        )
        db.commit()
        for reply_id, row in rows.items():
            self._live[reply_id].row = row
