"""The GUI thread's end of the engine's worker: the model's job events become queued
signals to the worker's thread, and the worker's signals come back as model calls.

The relays are methods of this QObject, which lives on the GUI thread, so Qt queues
every worker signal onto the GUI thread (a plain function as the receiver would run on
the worker's thread).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot

from app.model.chat import ChatModel
from app.shell.engine_thread.worker import WorkerThread
from engine.api.events import Divergence, Finished, TokenStep


class EngineLink(QObject):
    request_load = Signal(
        str, str, object
    )  # source, precision (engine.api.precision.PRECISIONS), KVQuantization or None
    request_submit = Signal(object)
    request_cancel = Signal(int)
    request_update = Signal(int, object)
    request_connect = Signal(object)  # app.model.remote_jobs.RemoteSpec

    def __init__(self, model: ChatModel, session_factory=None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.engine = WorkerThread(session_factory)
        worker = self.engine.worker
        self.request_load.connect(worker.load_model)
        self.request_submit.connect(worker.submit)
        self.request_cancel.connect(worker.cancel)
        self.request_update.connect(worker.update_params)
        self.request_connect.connect(worker.connect_remote)
        model.events.job_submitted.connect(self.request_submit.emit)
        model.events.cancel_requested.connect(self.request_cancel.emit)
        model.events.params_requested.connect(self.request_update.emit)
        worker.job_started.connect(self._on_job_started)
        worker.job_rejected.connect(self._on_job_rejected)
        worker.token_sampled.connect(self._on_token)
        worker.divergence_measured.connect(self._on_divergence)
        worker.job_finished.connect(self._on_finished)
        self.detached = False
        """The window is closing: what the worker reports from now on is not applied (the
        store closes; what was streaming is in the stream journal, recovered at the next start)."""

    def detach(self) -> None:
        self.detached = True

    @Slot(int, int, int)
    def _on_job_started(self, tag: int, request_id: int, prompt_tokens: int) -> None:
        if self.detached:
            return
        self.model.generation.on_job_started(tag, request_id, prompt_tokens)

    @Slot(int, object)
    def _on_job_rejected(self, tag: int, exc: BaseException) -> None:
        if self.detached:
            return
        self.model.generation.on_job_rejected(tag, exc)
        self.model.served.on_job_rejected(tag, exc)

    @Slot(int, object)
    def _on_token(self, tag: int, step: TokenStep) -> None:
        if self.detached:
            return
        self.model.generation.on_token(tag, step)
        self.model.served.on_token(tag, step)

    @Slot(int, object)
    def _on_divergence(self, group: int, event: Divergence) -> None:
        if self.detached:
            return
        self.model.generation.on_divergence(group, event)

    @Slot(int, object)
    def _on_finished(self, tag: int, finished: Finished) -> None:
        if self.detached:
            return
        self.model.generation.on_finished(tag, finished)
        self.model.served.on_finished(tag, finished)
