"""Models → Check precision…: the selected reply teacher-forced in the running precision and
in float32 (``EngineSession.check_fidelity``), on the engine's thread, then a dialog.

``FidelityRunner`` lives on the worker's thread beside ``EngineWorker`` and steps the check
one chunk per event (an :class:`app.shell.stepped_runner.SteppedRunner`), so a cancel queued meanwhile
applies at the next chunk; it sends back plain data: the rows (``TokenFidelity``, frozen
dataclasses of numbers) and their summary, computed there with ``engine.api.results.summarize``
(the app does not import MLX). ``PrecisionCheck`` is its GUI-thread end: what can be
checked, the progress in the status bar, Esc to stop, errors in a dialog, the result in
``app.views.precision_dialog``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

from app.model.reply_checks import selected_reply_problem
from app.shell.stepped_runner import SteppedRunner
from app.shell.worker import describe

if TYPE_CHECKING:
    from app.shell.window import MainWindow

CHUNK = 32  # tokens per forward pass: the progress and a cancel move at this step


@dataclass(frozen=True)
class PrecisionJob:
    tag: int
    messages: tuple[dict[str, str], ...]
    """The turns before the reply (its prompt)."""
    output: tuple[int, ...]
    """The reply's token ids."""


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
        from engine.api.results import summarize  # on the engine's thread: it imports MLX

        rows = self._done
        self._end()
        self.finished.emit(job.tag, rows, summarize(self._precision, rows))


class PrecisionCheck(QObject):
    """The GUI's end: what the selection allows, starting, stopping, and the answer."""

    request_start = Signal(object)
    request_cancel = Signal(int)

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.running: PrecisionJob | None = None
        self.steps: list = []  # the checked reply's steps (their text names the rows)
        self.dialog = None
        self._tag = 0
        engine = window.engine
        self.runner = FidelityRunner(engine.worker)
        self.runner.moveToThread(engine.thread)
        self.request_start.connect(self.runner.start)
        self.request_cancel.connect(self.runner.cancel)
        self.runner.progressed.connect(self._on_progressed)
        self.runner.finished.connect(self._on_finished)
        self.runner.failed.connect(self._on_failed)
        engine.worker.model_loaded.connect(self._on_model_loaded)

    def unavailable(self) -> str:
        """Why the selected reply cannot be checked now ("" when it can)."""
        window, model = self.window, self.window.model
        info = window.model_info
        if info is None:
            return "No model is loaded."
        if not info.capabilities.fidelity:
            return info.capabilities.reason("fidelity")
        if self.running is not None:
            return "A precision check is running (Esc stops it)."
        return selected_reply_problem(model, info.name, "check", "Select a token of a reply to check that reply.")

    def start(self) -> PrecisionJob | None:
        reason = self.unavailable()
        if reason:
            self.window.status.show_message(f"Check precision: {reason}", 8000)
            return None
        model = self.window.model
        stream = model.selection[0]
        message = model.message_of(stream)
        self.steps = list(model.steps_of(stream))
        self._tag += 1
        job = PrecisionJob(self._tag, model.context_for(message), tuple(s.token_id for s in self.steps))
        self.running = job
        self._show_progress(0, len(job.output))
        self.request_start.emit(job)
        return job

    def cancel(self) -> bool:
        """Stop a running check (Esc, Chat → Stop, a model load); True if one was running."""
        if self.running is None:
            return False
        self.request_cancel.emit(self.running.tag)
        self.running = None
        status = self.window.status
        status.progress.hide()
        status.show_message("Precision check stopped.")
        return True

    def _show_progress(self, done: int, total: int) -> None:
        progress = self.window.status.progress
        progress.setRange(0, 100)
        progress.setFormat(f"precision {done}/{total}")
        progress.setValue(int(100 * done / max(total, 1)))
        progress.show()
        self.window.status.show_message("Checking precision against float32… (Esc stops)", 0)

    def _on_progressed(self, tag: int, done: int, total: int) -> None:
        if self.running is not None and tag == self.running.tag:
            self._show_progress(done, total)

    def _on_finished(self, tag: int, rows: list, summary) -> None:
        if self.running is None or tag != self.running.tag:
            return  # cancelled meanwhile
        self.running = None
        self.window.status.progress.hide()
        self.window.status.show_message(f"Precision checked: {len(rows)} tokens.")
        from app.views.precision_dialog import PrecisionDialog

        self.dialog = PrecisionDialog(summary, rows, [s.piece for s in self.steps], self.window)
        self.dialog.switch_requested.connect(self._switch)
        self.dialog.open()

    def _on_failed(self, tag: int, exc: BaseException) -> None:
        if self.running is None or tag != self.running.tag:
            return
        self.running = None
        self.window.status.progress.hide()
        self.window.status.show_message("The precision check failed.")
        self.window.show_error(f"The precision check failed.\n\n{describe(exc)}")

    def _on_model_loaded(self, _info) -> None:
        self.cancel()  # its numbers would be of the model loaded before

    def _switch(self, choice: str) -> None:
        self.window.precision.choose(choice)
