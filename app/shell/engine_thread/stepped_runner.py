"""A job on the engine's thread, advanced one piece per event of the worker's loop.

Check precision… (``app.shell.engine_thread.fidelity_runner.FidelityRunner``), Compare models…
(``app.shell.engine_thread.compare_runner.CompareRunner``) and the logit lens
(``app.shell.engine_thread.lens_runner.LensRunner``) each pull an engine generator — forward chunks,
compared tokens, lens positions — on the worker's thread. They share this shape: a
``QObject`` moved to that thread beside ``EngineWorker``, reached through queued signals,
whose zero-timeout single-shot timer runs one piece (``_advance``) per event and re-arms
itself. The worker's decode timer is another zero-timeout timer of the same loop, and a
reply being written goes first: while the worker has a reply to step, a job's next piece
waits (the timer re-arms every ``WAIT_MS``) and the reply streams at the rate it would
alone (bench figure 19); the job goes on when the reply ends. A cancel queued meanwhile
applies before the next piece. Every failure goes back to the GUI as the exception itself
(``failed``), never silently.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.shell.engine_thread.step_timer import step_timer

WAIT_MS = 50  # how often a job waiting for a reply to end looks again


class SteppedRunner(QObject):
    """Subclasses call :meth:`_begin` from their ``start`` slot and implement :meth:`_advance`
    (one piece of ``job``; they call :meth:`_end` once the job is done). A job is any object
    with a ``tag``. Slots are not overridden (see :meth:`cancel`): the hooks are plain methods."""

    failed = Signal(int, object)  # tag, exception

    def __init__(self, worker: Any) -> None:
        super().__init__()
        self._worker = worker
        self._job: Any = None
        self._rows: Any = None  # the engine's generator, made by the first piece
        self._timer: QTimer | None = None

    def _begin(self, job: Any) -> None:
        """Drop what runs and run ``job``: its first piece in an event of its own, so a cancel
        queued before it applies."""
        self._end()
        self._job, self._rows = job, None
        if self._timer is None:
            self._timer = step_timer(self, self._step)
        self._timer.start()

    @Slot(int)
    def cancel(self, tag: int) -> None:
        # Subclasses extend this through _after_cancel, never by overriding the slot: PySide6
        # (6.11) connects an overriding @Slot directly, so it would run on the caller's thread.
        if self._job is not None and self._job.tag == tag:
            self._end()
        self._after_cancel(tag)

    def _after_cancel(self, tag: int) -> None:
        """What the cancelled job ``tag`` must not leave behind, even one that ended before
        the cancel arrived (nothing here)."""

    def _end(self) -> None:
        """Close the generator (the engine puts back whatever it changed for the job)."""
        if self._rows is not None and hasattr(self._rows, "close"):
            self._rows.close()
        self._job, self._rows = None, None

    @Slot()
    def _step(self) -> None:
        job = self._job
        if job is None:
            return
        if self._worker.writing():  # the reply goes first: one piece would stall it for its length
            self._timer.setInterval(WAIT_MS)
            self._timer.start()
            return
        self._timer.setInterval(0)
        try:
            self._advance(job)
        except Exception as exc:  # like the worker: every failure goes back to the GUI
            self._end()
            self._after_failure(job)
            self.failed.emit(job.tag, exc)
            return
        if self._job is job:  # neither finished nor cancelled by the piece
            self._timer.start()

    def _advance(self, job: Any) -> None:
        raise NotImplementedError

    def _after_failure(self, job: Any) -> None:
        """What a failed job must not leave behind (nothing here)."""
