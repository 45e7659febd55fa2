"""The GUI thread's end of an analysis of a reply (Check precision…, Compare models…, the
logit lens): one controller shape for running an :class:`app.model.reply_analysis.ReplyAnalysis`
on the worker.

An :class:`AnalysisController` holds the model layer's analysis and its runner (an
:class:`app.shell.engine_thread.stepped_runner.SteppedRunner` moved to the engine's thread beside
``EngineWorker``). It sends a job to the runner (:meth:`AnalysisController.send`) and a
cancel by tag (:meth:`AnalysisController.stop`) through queued signals; the runner's
signals arrive on the subclass's slots (queued onto the GUI thread) and go to the model
layer, whose events update the views. A failure comes back as the exception and goes to the
model layer in words (``describe``); a model load cancels the job (its numbers would be the
model's before). The controller's actions (``context.actions.add``) are enabled by one rule:
the backend's capability and the analysis's refusal, evaluated again whenever a job starts
or ends. It takes a :class:`app.shell.context.ShellContext`, never the window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction

from app.shell.engine_thread.worker import describe

if TYPE_CHECKING:
    from app.model.reply_analysis import ReplyAnalysis
    from app.shell.context import ShellContext
    from app.shell.engine_thread.stepped_runner import SteppedRunner


class AnalysisController(QObject):
    request_start = Signal(object)  # the job
    request_cancel = Signal(int)  # its tag

    def __init__(self, context: ShellContext, analysis: ReplyAnalysis, runner: SteppedRunner) -> None:
        super().__init__(context.parent)
        self.context, self.analysis, self.runner = context, analysis, runner
        engine = context.link.engine
        runner.moveToThread(engine.thread)
        self.request_start.connect(runner.start)
        self.request_cancel.connect(runner.cancel)
        runner.failed.connect(self._on_failed)
        engine.worker.model_loaded.connect(self._on_model_loaded)
        events = analysis.events
        for emitter in (events.started, events.finished, events.failed, events.cancelled):
            emitter.connect(context.actions.refresh_after)  # a running job may refuse another

    def add_action(
        self,
        text: str,
        slot: Callable[[], object],
        tooltip: str,
        needs: Callable[[], str],
        label: Callable[[str], str] | None = None,
    ) -> QAction:
        """An action under the analysis's rule: its capability, and ``needs`` of the state
        (``label``: its text for a reason the menu item itself must show)."""
        return self.context.actions.add(
            text,
            slot,
            capability=self.analysis.capability,
            needs=needs,
            tooltip=tooltip,
            status_tip=tooltip,
            prefix="",  # its tooltip names the action: a disabled one says the bare reason
            label=label,
        )

    # The worker -----------------------------------------------------------------------------------

    def send(self, job: Any) -> None:
        self.request_start.emit(job)

    @Slot(int, int, int)
    def _on_progressed(self, tag: int, done: int, total: int) -> None:
        self.analysis.on_progress(tag, done, total)

    @Slot(int, object, object)
    def _on_finished(self, tag: int, rows: list, found: Any) -> None:
        """A runner that finishes with rows and what else it found (the check's summary, the
        comparison's token texts)."""
        self.analysis.on_finished(tag, rows, found)

    def stop(self, job: Any) -> None:
        """``job`` was cancelled in the model layer: the runner drops it too."""
        self.request_cancel.emit(job.tag)

    @Slot(int, object)
    def _on_failed(self, tag: int, exc: BaseException) -> None:
        self.analysis.on_failed(tag, describe(exc))

    def _on_model_loaded(self, _info: Any) -> None:
        """Another model is in use: a running job's numbers would be the one before's."""
        raise NotImplementedError

    # The status bar ---------------------------------------------------------------------------------

    def show_progress(self, done: int, total: int, label: str, message: str | None = None) -> None:
        """``label done/total`` in the status bar's progress (busy when ``total`` is 0 or less)."""
        progress = self.context.status.progress
        if total <= 0:
            progress.setRange(0, 0)  # busy: the length is not known
            progress.setFormat(f"{label}: loading")
        else:
            progress.setRange(0, 100)
            progress.setValue(int(100 * done / total))
            progress.setFormat(f"{label} {done}/{total}")
        progress.show()
        if message is not None:
            self.context.status.show_message(message, 0)

    def hide_progress(self, message: str | None = None, ms: int = 4000) -> None:
        self.context.status.progress.hide()
        if message is not None:
            self.context.status.show_message(message, ms)
