"""Scored texts and replays on the engine's thread: one chunk of the teacher-forced pass per
event of the worker's loop (a zero-timeout timer), so a cancel queued meanwhile applies
between chunks. ``ScoreSteps`` is the worker's (``app.shell.engine_thread.worker.EngineWorker``) and
reports through its signals, under each job's tag, as a reply's events are.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot

from app.model.replay import ReplayJob
from app.model.scored import ScoreJob
from app.shell.engine_thread.step_timer import step_timer
from engine.api.errors import EngineError
from engine.api.events import Finished, FinishReason, PrefillProgress, ScoreDone, TokenStep


class GenerationFailed(RuntimeError):
    """A decode step (or a scoring chunk) raised; the replies it ran were ended. ``__cause__``
    is the error."""


class ScoreSteps(QObject):
    def __init__(self, worker: Any) -> None:
        super().__init__(worker)
        self.worker = worker
        self._scores: dict[int, Any] = {}  # tag -> a ScoreJob's or ReplayJob's event generator
        self._scored: dict[int, list[str]] = {}  # tag -> the texts of its steps so far
        self._timer: QTimer | None = None

    def submit(self, session: Any, job: ScoreJob | ReplayJob) -> None:
        worker = self.worker
        try:
            need = "score" if isinstance(job, ScoreJob) else "replay"
            if why := session.capabilities.reason(need):  # "" when the backend can
                raise EngineError(f"{need}: {why}")
            if isinstance(job, ScoreJob):
                events = session.score_text(job.text, job.params, job.prompt, request_id=job.tag)
            elif job.text is not None:  # a text scored without a prompt: as it was scored
                events = session.replay_text(job.text, job.output, job.params, request_id=job.tag)
            else:
                events = session.replay(job.messages, job.output, job.params, request_id=job.tag)
            events = iter(events)
        except Exception as exc:
            worker.job_rejected.emit(job.tag, exc)
            return
        self._scores[job.tag] = events
        self._scored[job.tag] = []
        worker.job_started.emit(job.tag, job.tag, 0)
        if self._timer is None:
            self._timer = step_timer(self, self._step)
        self._timer.start()

    def cancel(self, tag: int) -> bool:
        """Stop job ``tag`` if it is one of these (True), its ``Finished("cancelled")`` sent."""
        if tag not in self._scores:
            return False
        self._end(tag, FinishReason.CANCELLED)
        return True

    def close(self) -> None:
        """Drop every job (the worker shuts down)."""
        for tag in list(self._scores):
            self._scores.pop(tag).close()

    @Slot()
    def _step(self) -> None:
        """Run each scoring job up to its next chunk, so a cancel queued meanwhile applies."""
        worker = self.worker
        for tag in list(self._scores):
            events = self._scores.get(tag)
            try:
                for event in events:
                    if isinstance(event, TokenStep):
                        self._scored[tag].append(event.text)
                        worker.token_sampled.emit(tag, event)
                    elif isinstance(event, PrefillProgress):
                        worker.prefill_progressed.emit(tag, event.done, event.total)
                        break
                    elif isinstance(event, ScoreDone):
                        worker.score_finished.emit(tag, event)
                        self._end(tag, FinishReason.SCORED, event)
                        break
                else:
                    self._end(tag, FinishReason.SCORED)
            except Exception as exc:
                failure = GenerationFailed(f"scoring failed: {type(exc).__name__}: {exc}")
                failure.__cause__ = exc
                worker.errored.emit(failure)
                self._end(tag, FinishReason.ERROR, error=str(exc))
        if self._scores and self._timer is not None:
            self._timer.start()

    def _end(self, tag: int, reason: FinishReason, done: ScoreDone | None = None, error: str | None = None) -> None:
        events = self._scores.pop(tag, None)
        if events is None:
            return
        events.close()
        texts = self._scored.pop(tag, [])
        rate = done.tokens_per_second if done is not None else 0.0
        finished = Finished(tag, reason, 0, 0, len(texts), rate, 0.0, "".join(texts), error=error)
        self.worker.job_finished.emit(tag, finished)
