"""The app as a server under load (issue 49, point 4), with the tiny model and real HTTP
clients on 127.0.0.1: a burst of served requests is written off the GUI thread, the database
keeps exactly the retention after a burst larger than it, and Server → Delete served
requests… asks, then deletes every served request but the open conversation's."""

from __future__ import annotations

import sqlite3
import threading

import pytest

pytest.importorskip("pytestqt")
httpx = pytest.importorskip("httpx")

from tests.app.shell.test_app_serving import in_background, start_serving  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402

KEEP = 5
BURST = 12
SERVED_WRITES = (
    "INSERT INTO SERVED",
    "UPDATE SERVED",
    "INSERT INTO CONVERSATIONS",
    "INSERT INTO MESSAGES",
    "INSERT INTO BRANCHES",
)


def burst(url: str, count: int) -> list[int]:
    """``count`` completions sent at once, each from a thread of its own; their statuses."""
    statuses: list[int] = [0] * count
    go = threading.Event()

    def one(i: int) -> None:
        go.wait()
        body = {"prompt": f"request {i}", "max_tokens": 2, "temperature": 0}
        statuses[i] = httpx.post(f"{url}/completions", json=body, timeout=120).status_code

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    go.set()
    for thread in threads:
        thread.join(120)  # a hang guard
    return statuses


def stored(db) -> tuple[int, int]:
    """(served rows, conversations) in the file, read over a connection of the test's own."""
    with sqlite3.connect(str(db)) as con:
        served = con.execute("SELECT COUNT(*) FROM served").fetchone()[0]
        conversations = con.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]
    con.close()
    return served, conversations


def settle(qtbot, window, count: int) -> None:
    """Every one of ``count`` requests ended in the GUI, and the writer's work for them done
    and reported back (an event: the writer's queue drained; then its posted results)."""
    served = window.model.served
    qtbot.waitUntil(lambda: served.count == count and not served.live, timeout=TIMEOUT)
    assert served.writer.wait(TIMEOUT / 1000)
    marker: list[bool] = []
    window.serving.poster.posted.emit(lambda: marker.append(True))  # behind every result posted before
    qtbot.waitUntil(lambda: bool(marker), timeout=TIMEOUT)


def test_a_burst_is_written_off_the_gui_thread_within_the_retention(qtbot, profile, tiny_folder):
    db, _settings = profile
    window = open_window(qtbot, profile, str(tiny_folder))
    try:
        window.serving.cleanup.set_keep(KEEP)
        gui_writes: list[str] = []
        window.store.db.set_trace_callback(
            lambda sql: gui_writes.append(sql) if sql.lstrip().upper().startswith(SERVED_WRITES) else None
        )
        url = start_serving(window)
        call = in_background(lambda: burst(url, BURST))
        qtbot.waitUntil(lambda: "result" in call or "error" in call, timeout=TIMEOUT)
        assert call.get("result") == [200] * BURST, call
        settle(qtbot, window, BURST)
        window.store.db.set_trace_callback(None)
        # Not one of the requests' rows was written over the GUI thread's connection.
        assert gui_writes == []
        # Exactly the retention is left: the newest KEEP requests and their conversations.
        assert stored(db) == (KEEP, KEEP)
        served = window.model.served
        assert len(served.rows) == KEEP and window.serving.list.row_count() == KEEP
        assert {r.finish_reason for r in served.rows} == {"length"}
        assert [r.id for r in served.rows] == sorted((r.id for r in served.rows), reverse=True)
        # A smaller retention set with nothing open and nothing being written applies at once.
        window.serving.cleanup.set_keep(2)
        settle(qtbot, window, BURST)
        assert stored(db) == (2, 2) and len(served.rows) == 2
        # The setting is kept for the next start.
        assert int(window.settings.value("serving/keep_requests")) == 2
    finally:
        window.serving.stop()
        close_window(window)


def test_delete_served_requests_asks_then_keeps_only_the_open_one(qtbot, profile, tiny_folder):
    from PySide6.QtWidgets import QMessageBox

    db, _settings = profile
    window = open_window(qtbot, profile, str(tiny_folder))
    try:
        url = start_serving(window)
        call = in_background(lambda: burst(url, 4))  # off the GUI thread: it must answer them
        qtbot.waitUntil(lambda: "result" in call or "error" in call, timeout=TIMEOUT)
        assert call.get("result") == [200] * 4, call
        settle(qtbot, window, 4)
        served = window.model.served
        assert stored(db) == (4, 4)
        kept = served.rows[1]
        window.serving.list.opened.emit(kept.conversation_id)
        # Asked first: Cancel deletes nothing.
        window.serving.cleanup.delete_action.trigger()
        box = window.serving.cleanup.confirm
        assert box is not None and "Delete 3 served requests" in box.text()
        box.button(QMessageBox.StandardButton.Cancel).click()
        assert not window.serving.cleanup.deleting and stored(db) == (4, 4)
        # Delete: every one but the open conversation's, in the list and in the file.
        window.serving.cleanup.delete_action.trigger()
        box = window.serving.cleanup.confirm
        (delete,) = [b for b in box.buttons() if box.buttonRole(b) == QMessageBox.ButtonRole.DestructiveRole]
        delete.click()
        qtbot.waitUntil(lambda: not window.serving.cleanup.deleting, timeout=TIMEOUT)
        assert stored(db) == (1, 1)
        assert [r.id for r in served.rows] == [kept.id] and window.serving.list.row_count() == 1
        assert "Deleted 3 served requests." in window.statusBar().currentMessage()
    finally:
        window.serving.stop()
        close_window(window)
