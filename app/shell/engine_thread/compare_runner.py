"""Compare models on the engine's thread: load the second model, then score the reply's tokens
under both, one chunk per event of the worker's loop.

``CompareRunner`` lives on the worker's thread beside ``EngineWorker`` (a
:class:`app.shell.engine_thread.stepped_runner.SteppedRunner`, as the precision check's and the logit
lens's runners are) and calls ``EngineSession.load_second`` then
``compare_reply`` / ``compare_text``. The load runs in an event of its own and the rows
are pulled one forward chunk per event, so a cancel queued meanwhile applies at the next
step; a cancelled job's second model is released (its late results are dropped by the GUI's
:class:`app.model.model_compare.ModelComparisons`). Everything sent back is plain data:
the ``SecondModel``, ``engine.api.results.TokenKLD`` rows and the text of each token they name
(the app does not import MLX). The second model stays loaded for the next comparison
with the same settings, and goes when a job is cancelled, when the running model changes
(``release``) or when other settings are asked for.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal, Slot

from app.model.model_compare import CompareJob, CompareSettings
from app.shell.engine_thread.stepped_runner import SteppedRunner
from engine.api.errors import EngineError


class CompareRunner(SteppedRunner):
    loading = Signal(int, str, float)  # tag, stage, fraction (< 0: unknown length)
    loaded = Signal(int, object)  # tag, engine.api.results.SecondModel
    progressed = Signal(int, int, int)  # tag, tokens done, tokens in all
    finished = Signal(int, object, object)  # tag, [TokenKLD], {token_id: text}

    def __init__(self, worker) -> None:
        super().__init__(worker)
        self._done: list = []
        self._session: Any = None  # the session holding the second model
        self._held: CompareSettings | None = None  # what the second model held was loaded as
        self._owner = -1  # the tag of the last job that used it

    @Slot(object)
    def start(self, job: CompareJob) -> None:
        self._done = []
        self._begin(job)  # the load is the first piece: a cancel queued before it applies

    def _after_cancel(self, tag: int) -> None:
        if self._owner == tag:  # cancelled, even if it ended before the cancel arrived
            self.release()

    @Slot()
    def release(self) -> None:
        """Free the second model (another running model, a cancelled job)."""
        if self._session is not None:
            self._session.release_second()
        self._session, self._held, self._owner = None, None, -1

    def _advance(self, job: CompareJob) -> None:
        if self._rows is None:
            self._rows = self._load(job)
        else:
            self._pull(job)

    def _after_failure(self, job: CompareJob) -> None:
        if self._owner == job.tag:
            self.release()  # a comparison that broke keeps nothing loaded for it

    def _load(self, job: CompareJob):
        """Load (or keep) the second model and start the comparison's generator."""
        session = self._worker.compare_session()
        if session is None or session.info is None:
            raise EngineError("comparing models needs a model loaded here.")
        if self._session is not None and self._session is not session:
            self.release()  # held by a session no longer in use
        second = session.second_model()
        if second is None or self._held != job.settings:
            self._held = None  # load_second releases what was held before it checks the new one
            self.loading.emit(job.tag, "checking memory", -1.0)
            second = session.load_second(
                job.settings.source,
                progress=lambda stage, f: self.loading.emit(job.tag, stage, f),
                **job.settings.load_options(),
            )
            self._held = job.settings
        self._session, self._owner = session, job.tag
        self.loaded.emit(job.tag, second)
        if job.text is not None:
            return iter(session.compare_text(job.text, None, job.top, job.chunk))
        return iter(session.compare_reply(list(job.messages or ()), list(job.output), job.top, job.chunk))

    def _pull(self, job: CompareJob) -> None:
        """At most one forward chunk of rows, each checked against the reply's own token."""
        for _ in range(job.chunk):
            row = next(self._rows, None)
            if row is None:
                self._finish(job)
                return
            if row.index >= len(job.output) or row.token_id != job.output[row.index]:
                raise EngineError(
                    f"token {row.index} is not the reply's: the text tokenizes differently now, "
                    "so its tokens cannot be compared."
                )
            self._done.append(row)
        self.progressed.emit(job.tag, len(self._done), len(job.output))

    def _finish(self, job: CompareJob) -> None:
        rows = self._done
        if len(rows) != len(job.output):
            raise EngineError(f"{len(rows)} tokens were compared of the reply's {len(job.output)}.")
        ids = {r.token_id for r in rows}
        for r in rows:
            ids.update(t for t, _ in r.top_base)
            ids.update(t for t, _ in r.top_model)
        texts = {t: self._session.token_text(t) for t in sorted(ids)}
        self._end()
        self.finished.emit(job.tag, rows, texts)
