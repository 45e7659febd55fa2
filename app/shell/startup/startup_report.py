"""``python -m app --startup-report PATH``: how long the app takes to start (bench figure 15).

Times are seconds from the launch (``LOGITSCOPE_LAUNCHED_AT``, a ``time.time()`` the
launcher sets just before starting the process; else the moment ``app.__main__`` began):

- ``python_ready``: the interpreter is up and ``app.__main__`` runs;
- ``qt_imported``: PySide6, pyqtgraph and the app's views are imported;
- ``window_built`` / ``window_shown``: ``MainWindow()`` returned / ``show()`` returned;
- ``answers_input``: the event loop ran its first event after ``show()`` (a zero-timeout
  timer posted then): the window reacts to a key or a click from here on;
- ``model_ready``: the worker reported the model loaded (``model_loaded``), with each
  progress stage the loader reported (``stages``: name, fraction, time);
- ``max_gap_ms_while_loading``: the longest the GUI thread went without running a 20 ms
  timer between ``answers_input`` and ``model_ready`` (the worker imports MLX and loads
  the weights meanwhile; a long gap would be a window that stops answering).

The report is written as JSON once the model is ready (or failed), and the app quits.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QWidget

if TYPE_CHECKING:
    from app.shell.engine_thread.worker import EngineWorker


def launched_at(fallback: float) -> float:
    value = os.environ.get("LOGITSCOPE_LAUNCHED_AT")
    try:
        return float(value) if value else fallback
    except ValueError:
        return fallback


class StartupReport(QObject):
    def __init__(
        self, window: QWidget, worker: EngineWorker, path: str | Path, launched: float, marks: dict[str, float]
    ) -> None:
        """``window`` is closed once the report is written; ``worker`` reports the load."""
        super().__init__(window)
        self.window, self.path, self.launched = window, Path(path), launched
        self.report: dict = {k: round(v - launched, 3) for k, v in marks.items()}
        self.report["stages"] = []
        self._last_tick: float | None = None
        self._max_gap = 0.0
        self._ticker = QTimer(self)
        self._ticker.setInterval(20)
        self._ticker.timeout.connect(self._tick)
        worker.model_progressed.connect(self._progress)
        # Bound slots of this GUI-thread object: queued from the worker's thread (a lambda
        # would run on the worker's thread).
        worker.model_loaded.connect(self._loaded)
        worker.model_failed.connect(self._failed)
        QTimer.singleShot(0, self._first_event)

    def mark(self, name: str) -> None:
        self.report[name] = round(time.time() - self.launched, 3)

    def _first_event(self) -> None:
        self.mark("answers_input")
        self._last_tick = time.perf_counter()
        self._ticker.start()

    def _tick(self) -> None:
        now = time.perf_counter()
        if self._last_tick is not None:
            self._max_gap = max(self._max_gap, now - self._last_tick)
        self._last_tick = now

    def _progress(self, stage: str, fraction: float) -> None:
        self.report["stages"].append([stage, round(fraction, 3), round(time.time() - self.launched, 3)])

    def _loaded(self, _info) -> None:
        self._finish("model_ready")

    def _failed(self, _source: str, exc: BaseException) -> None:
        self._finish("model_failed", str(exc))

    def _finish(self, name: str, error: str | None = None) -> None:
        self.mark(name)
        self._tick()
        self._ticker.stop()
        self.report["max_gap_ms_while_loading"] = round(self._max_gap * 1000, 1)
        if error is not None:
            self.report["error"] = error
        self.path.write_text(json.dumps(self.report, indent=1))
        QTimer.singleShot(0, self.window.close)
