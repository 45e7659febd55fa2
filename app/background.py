"""The app's :class:`app.model.background.Background`: one worker thread from a
``QThreadPool`` (so pieces of work finish in order), results delivered on the GUI thread
through a queued signal. ``wait()`` (before closing the store) finishes everything."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, Signal, Slot


class QtBackground(QObject):
    _finished = Signal(object, object)  # then, result (or the exception work raised)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(1)
        self.pending = 0
        self._finished.connect(self._on_finished)

    def __call__(self, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
        self.pending += 1

        def run() -> None:
            try:
                result = work()
            except Exception as exc:  # handed to ``then``, which reports it
                traceback.print_exc()
                result = exc
            self._finished.emit(then, result)

        self.pool.start(QRunnable.create(run))

    @Slot(object, object)
    def _on_finished(self, then: Callable[[Any], None], result: Any) -> None:
        self.pending -= 1
        then(result)

    def wait(self) -> None:
        self.pool.waitForDone()
        QCoreApplication.sendPostedEvents(self)  # deliver the queued results now
