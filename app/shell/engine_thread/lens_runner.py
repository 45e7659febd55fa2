"""The logit lens on the engine's thread: a reply's positions read layer by layer, one
position per event of the worker's loop.

``LensRunner`` (a :class:`app.shell.engine_thread.stepped_runner.SteppedRunner`) lives on the worker's
thread beside ``EngineWorker`` and pulls ``EngineSession.lens_reply`` (or ``lens_text`` for a
text scored without a prompt) one ``engine.api.results.LensPosition`` per event. The worker's decode
steps are events of the same loop, so a reply being written keeps streaming while the lens
runs: its steps run between the lens's pieces. What a step may wait for is one piece — the
first holds the lens's one forward pass over the reply (up to its last position asked for),
and every 16th the read-out of the next 16 positions through every layer (``engine.analysis.lens``
reads them in groups); the others hand over a position already read. Cancel closes the
generator. Everything sent back is plain data: the ``LensPosition`` and the text of each
token it names that was not sent before (the app does not import MLX).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal, Slot

from app.model.logit_lens import LensJob
from app.shell.engine_thread.stepped_runner import SteppedRunner
from engine.api.errors import EngineError


class LensRunner(SteppedRunner):
    position_ready = Signal(int, object, object)  # tag, engine.api.results.LensPosition, {token_id: text} new ones
    finished = Signal(int)  # tag: every position asked for was sent

    def __init__(self, worker: Any) -> None:
        super().__init__(worker)
        self._session: Any = None
        self._named: set[int] = set()  # token ids whose text this job has sent
        self._sent = 0

    @Slot(object)
    def start(self, job: LensJob) -> None:
        self._begin(job)

    def _end(self) -> None:
        super()._end()
        self._session, self._named, self._sent = None, set(), 0

    def _advance(self, job: LensJob) -> None:
        if self._rows is None:
            self._rows = self._open(job)
        row = next(self._rows, None)
        if row is None:
            if self._sent != job.total:
                raise EngineError(f"{self._sent} positions were read of the {job.total} asked for.")
            self._end()
            self.finished.emit(job.tag)
            return
        if row.position >= len(job.output) or row.chosen != job.output[row.position]:
            raise EngineError(
                f"token {row.position} is not the reply's: the text tokenizes differently now, "
                "so its layers cannot be read."
            )
        ids = {row.chosen} | {t for layer in row.layers for t, _ in layer.top}
        texts = {t: self._session.token_text(t) for t in sorted(ids - self._named)}
        self._named |= ids
        self._sent += 1
        self.position_ready.emit(job.tag, row, texts)

    def _open(self, job: LensJob) -> Any:
        """The session's lens generator for ``job`` (its arguments checked by the engine)."""
        session = self._worker.session_with("logit_lens")
        if session is None or session.info is None:
            raise EngineError("the logit lens needs a model loaded here (a server does not send its layers).")
        self._session = session
        positions = None if job.positions is None else list(job.positions)
        if job.text is not None:
            return iter(session.lens_text(job.text, None, positions, job.top))
        return iter(session.lens_reply(list(job.messages or ()), list(job.output), positions, job.top))
