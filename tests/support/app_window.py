"""Driving the main window under pytest-qt: open it on a model, send a message, find a token.

The ``profile`` fixture these take (a database path and a ``QSettings``) is in ``tests/conftest.py``."""

from __future__ import annotations

import threading

from PySide6.QtCore import QCoreApplication, QObject, QPoint, Qt, Signal, Slot
from PySide6.QtWidgets import QWidget

from engine.api.params import SamplingParams

TIMEOUT = 60_000
"""A hang guard (ms) for waits on the app: far above what any wait here takes on a busy machine."""


def open_window(qtbot, profile, model, session_factory=None):
    """The main window on ``profile``, once ``model`` has loaded (or failed to); a
    ``session_factory`` stands in for ``EngineSession`` where a test slows or records it."""
    from app.shell.window import MainWindow

    db, settings = profile
    window = MainWindow(db_path=db, settings=settings, model=model, session_factory=session_factory)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None or bool(window.last_error), timeout=TIMEOUT)
    return window


def close_window(window):
    window.close()
    assert window.engine.thread.isFinished()


def send(qtbot, window, text, params: SamplingParams, wait=True):
    window.controls.set_params(params)
    window.composer.setPlainText(text)
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    if wait:
        qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)


def assistant_entries(window):
    return [i for i, e in enumerate(window.entries) if e.role == "assistant"]


def live_steps(window):
    return [reply.new_steps for reply in window.model.replies.values()]


def token_point(window, ref) -> QPoint:
    """Where the chat view draws token ``ref``, in viewport coordinates (after a redraw)."""
    window._redraw_if_dirty()
    point = window.chat.point_of(ref)
    assert point is not None, f"token {ref} is not drawn"
    href = window.chat.anchorAt(point)
    assert window.chat.writer.ref_of(href) == ref, (href, ref)
    return point


class _Marker(QObject):
    """Lives on the engine's thread; ``ping`` (queued) sets ``ran`` once that thread gets to it."""

    ping = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.ran = threading.Event()
        self.ping.connect(self._mark, Qt.ConnectionType.QueuedConnection)

    @Slot()
    def _mark(self) -> None:
        self.ran.set()


def drain_engine_thread(qtbot, window, rounds: int = 2) -> None:
    """Wait until the engine's thread has handled every event queued to it before this call,
    then deliver to the GUI what it sent meanwhile. A negative check ("a late result is
    dropped", "nothing was loaded") waits on this, not on a fixed time: whatever the engine's
    thread would have done has then been done and reached the window. ``rounds`` markers one
    after another also cover work a handled event queued again (a runner's next piece)."""
    for _ in range(rounds):
        marker = _Marker()
        marker.moveToThread(window.engine.thread)
        marker.ping.emit()
        qtbot.waitUntil(marker.ran.is_set, timeout=TIMEOUT)
        QCoreApplication.sendPostedEvents()
        QCoreApplication.processEvents()
        marker.deleteLater()


def settle(*widgets: QWidget) -> None:
    """Lay ``widgets`` out now, where a test would wait a fixed time for the event loop to get
    there: deliver the posted events (resizes, layout requests) and the window system's, and
    activate each widget's layout, until a round moves none of them or their children (a fixed
    point, however slow the machine; at most 20 rounds)."""

    def geometry() -> list:
        return [(w.geometry().getRect(), [c.geometry().getRect() for c in w.findChildren(QWidget)]) for w in widgets]

    before = None
    for _ in range(20):
        QCoreApplication.sendPostedEvents()
        QCoreApplication.processEvents()
        for widget in widgets:
            if widget.layout() is not None:
                widget.layout().activate()
        now = geometry()
        if now == before:
            return
        before = now
