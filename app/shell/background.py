"""The app's :class:`app.model.background.Background`: one worker thread (so pieces of work
finish in order), results delivered on the GUI thread through a queued signal. ``wait()``
(before closing the store) finishes everything.

A Python thread (``concurrent.futures``), not ``QThreadPool`` with ``QRunnable.create``:
the pool deletes a runnable when it has run while PySide still held a wrapper for that
address, and a later QObject allocated there came back from ``children()`` as a
``QRunnable`` (pyqtgraph failed on it) or crashed the process.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Signal, Slot


class QtBackground(QObject):
    _finished = Signal(object, object)  # then, result (or the exception work raised)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background")
        self.pending = 0
        self._last: Future | None = None
        self._finished.connect(self._on_finished)  # queued: emitted on the worker thread

    def __call__(self, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
        self.pending += 1

        def run() -> None:
            try:
                result = work()
            except Exception as exc:  # handed to ``then``, which reports it
                traceback.print_exc()
                result = exc
            self._finished.emit(then, result)

        self._last = self.executor.submit(run)

    @Slot(object, object)
    def _on_finished(self, then: Callable[[Any], None], result: Any) -> None:
        self.pending -= 1
        then(result)

    def wait(self) -> None:
        if self._last is not None:
            self._last.result()  # one worker: the last piece of work ends after every other
        QCoreApplication.sendPostedEvents(self)  # deliver the queued results now
