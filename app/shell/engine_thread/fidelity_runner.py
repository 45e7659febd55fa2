"""Models → Check precision… on the engine's thread.

``FidelityRunner`` lives on the worker's thread beside ``EngineWorker`` and steps the check
(``EngineSession.check_fidelity``) one chunk per event (a
:class:`app.shell.engine_thread.stepped_runner.SteppedRunner`), so a cancel queued meanwhile
applies at the next chunk; it sends back plain data: the rows (``TokenFidelity``, frozen
dataclasses of numbers) and their summary, computed there with ``engine.api.results.summarize``
(the app does not import MLX). Its GUI end is ``app.shell.controllers.precision_check``.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot

from app.model.precision_check import PrecisionJob
from app.shell.engine_thread.stepped_runner import SteppedRunner
from engine.api.results import summarize

CHUNK = 32  # tokens per forward pass: the progress and a cancel move at this step


class FidelityRunner(SteppedRunner):
    progressed = Signal(int, int, int)  # tag, tokens done, tokens in all
    finished = Signal(int, object, object)  # tag, [TokenFidelity], FidelitySummary

    def __init__(self, worker) -> None:
        super().__init__(worker)
        self._done: list = []
        self._precision = ""

    @Slot(object)
    def start(self, job: PrecisionJob) -> None:
        self._done = []
        self._begin(job)

    def _advance(self, job: PrecisionJob) -> None:
        """The check's generator first, then at most ``CHUNK`` rows per piece."""
        if self._rows is None:
            session = self._worker.fidelity_session()
            if session is None or session.info is None:
                raise RuntimeError("the precision check needs a model loaded here (a server does not say).")
            self._precision = session.info.precision
            self._rows = iter(session.check_fidelity(list(job.messages), list(job.output), CHUNK))
        for _ in range(CHUNK):
            row = next(self._rows, None)
            if row is None:
                self._finish(job)
                return
            self._done.append(row)
        self.progressed.emit(job.tag, len(self._done), len(job.output))

    def _finish(self, job: PrecisionJob) -> None:
        rows = self._done
        self._end()
        self.finished.emit(job.tag, rows, summarize(self._precision, rows))
