"""What a failed step ends: a mixin of :class:`engine.runtime.scheduler.Scheduler`.

An exception inside a step (the model, the chain, the transfer) ends only the requests of
that step, with the message in ``Finished.error``; their earlier tokens stand.
"""

from __future__ import annotations

from engine.api.events import Event, FinishReason
from engine.sampling.batch import SamplingBatch


class FaultsMixin:
    """Needs the scheduler's ``_active``, ``_waiting``, ``_prefilling``, ``_batch``,
    ``_lookahead``, ``_sampling``, ``vocab_size``, ``breakers``, ``_remove_rows`` and
    ``_finished``."""

    def _fail_active(self, exc: Exception) -> list[Event]:
        """A decode step failed: its rows end with ``"error"`` (their earlier tokens stand),
        and the batch starts afresh, so the next request runs as on a new scheduler."""
        failed, self._active = self._active, []
        self._batch = None
        self._lookahead.clear()
        self._sampling = SamplingBatch(self.vocab_size, self.breakers)
        message = f"{type(exc).__name__}: {exc}"
        return [self._finished(r, FinishReason.ERROR, error=message) for r in failed]

    def _fail_waiting(self, exc: Exception) -> list[Event]:
        """A prefill chunk (or the first token after it) failed: that request and its fork
        group end; rows of it that already joined the batch are dropped again."""
        group, self._prefilling = self._prefilling, []
        ids = {r.id for r in group}
        if group and group[0] in self._waiting:
            self._waiting.remove(group[0])
        joined = [i for i, r in enumerate(self._active) if r.id in ids]
        if joined:
            self._remove_rows(joined)
        for member in group:
            member.caches, member.followers = None, []
        message = f"{type(exc).__name__}: {exc}"
        return [self._finished(r, FinishReason.ERROR, error=message) for r in group if not r.finished]
