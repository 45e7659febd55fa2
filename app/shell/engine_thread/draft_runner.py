"""Loading a draft model on the engine's thread (Models → Draft model…).

``DraftRunner`` lives on the worker's thread beside ``EngineWorker`` and calls the session's
``load_draft`` / ``release_draft`` (``engine.api.backend.Backend``). A load is one call that
reports its progress; a cancel cannot wait for a queued signal (the thread is busy loading),
so it sets a flag the progress callback reads, which stops the load at its next report and
leaves the running model and its draft as they were. Everything sent back is plain data:
an ``engine.api.draft.DraftModel``, or the exception.
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from engine.api.errors import EngineError


class DraftCancelled(Exception):
    """The load was cancelled from the GUI (never shown as an error)."""


class DraftRunner(QObject):
    loading = Signal(int, str, float)  # tag, stage, fraction (< 0: unknown length)
    loaded = Signal(int, object)  # tag, DraftModel
    failed = Signal(int, object)  # tag, exception (DraftCancelled when cancelled)
    released = Signal()

    def __init__(self, worker: Any) -> None:
        super().__init__()
        self._worker = worker
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()

    def cancel(self, tag: int) -> None:
        """Called on the GUI thread, directly: the load in progress stops at its next report."""
        with self._lock:
            self._cancelled.add(tag)

    def _check(self, tag: int) -> None:
        with self._lock:
            if tag in self._cancelled:
                raise DraftCancelled()

    @Slot(int, str, str, int)
    def load(self, tag: int, source: str, precision: str, tokens: int) -> None:
        def progress(stage: str, fraction: float) -> None:
            self._check(tag)
            self.loading.emit(tag, stage, fraction)

        try:
            self._check(tag)
            session = self._worker.session_with("draft")
            if session is None or getattr(session, "info", None) is None:
                raise EngineError("a draft model proposes to a model that runs here: load a local model first.")
            self.loading.emit(tag, "checking memory", -1.0)
            held = session.load_draft(source, precision, tokens, progress)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the GUI, never silently
            self.failed.emit(tag, exc)
            return
        finally:
            with self._lock:
                self._cancelled.discard(tag)
        self.loaded.emit(tag, held)

    @Slot()
    def release(self) -> None:
        session = self._worker.session_with("draft")
        if session is not None:
            session.release_draft()
        self.released.emit()
