"""Which backend, model and precision wrote a reply, and the words every view labels it by.

A reply is labelled by what produced it, never by the model loaded now (a local
reply once read "server reports: penalties" after connecting to a server, and a server's reply
showed an empty entropy plot without a word after going back to a local model). The store
keeps each branch's model, ``model_source``, ``precision`` and ``backend``
(:meth:`app.store.store.Store.note_model`); a reply being written has the loaded model's.
A reply saved before ``backend`` was recorded (schema 7) is told apart by its steps: a
server's carry ``reported_stage``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.model.remote_labels import server_title
from engine.api.events import TokenStep

LOCAL = "local"
REMOTE = "remote"
NOT_REPORTED_ENTROPY = "entropy: not reported by the server"


def backend_of(info) -> str:
    """What the store records for the backend of ``info`` (an ``engine.api.backend.ModelInfo``):
    ``local``, or ``remote:<server kind>:<stage>:detected`` / ``…:set`` — the stage the
    server's numbers are, followed from the server's kind or set (or assumed) in Connect….
    A server is known by its capabilities (it reports one stage), not by its type."""
    if info.capabilities.full_chain:
        return LOCAL
    return f"{REMOTE}:{info.server}:{info.reported_stage}:{'detected' if info.stage_detected else 'set'}"


@dataclass(frozen=True)
class ReplyOrigin:
    """What produced one reply: the model's name, where it was loaded from, what it computed
    in and the backend (``backend_of``'s words; None: not recorded)."""

    model: str = ""
    source: str | None = None
    precision: str | None = None
    backend: str | None = None
    step_stage: str | None = None
    """The stage its steps' numbers are (``reported_stage``; None for a local reply): what
    tells a server's reply saved before ``backend`` was recorded."""

    @classmethod
    def of(
        cls,
        model: str,
        source: str | None,
        precision: str | None,
        backend: str | None,
        steps: Sequence[TokenStep] = (),
    ) -> ReplyOrigin:
        # The newest token's: a reply continued after a change of backend is the new one's
        # (and the views ask at every redraw: not a walk over a 20,000-token reply).
        stage = steps[-1].reported_stage if steps else None
        return cls(model, source, precision, backend, stage)

    def _parts(self) -> list[str]:
        parts = (self.backend or "").split(":")
        return parts if len(parts) == 4 and parts[0] == REMOTE else []

    @property
    def remote(self) -> bool:
        """A server's reply: recorded so, or (saved before that was recorded) its steps say."""
        if self.backend is not None:
            return self.backend.startswith(REMOTE)
        return self.step_stage is not None

    @property
    def server(self) -> str:
        """The server kind recorded (``mlx_lm``, ``vllm``, …); "" when not recorded."""
        return self._parts()[1] if self._parts() else ""

    @property
    def stage(self) -> str | None:
        """The stage the server reports, as the connection declared it (the status bar's);
        the steps' own where that was not recorded."""
        return (self._parts()[2] if self._parts() else None) or self.step_stage

    @property
    def stage_detected(self) -> bool:
        return bool(self._parts()) and self._parts()[3] == "detected"

    def stage_words(self) -> str:
        """``server reports: penalties (detected for mlx_lm.server)`` for a server's reply
        (``(set or assumed in Connect…)`` where it was not detected; the server kind left out
        where it was not recorded); "" for a local one."""
        if not self.remote:
            return ""
        # The steps' own stage first: a server that reports after its penalties (mlx_lm.server)
        # reports raw numbers for a request with none, and the steps say so; the connection's
        # stage alone would name one stage in the title and another under it.
        stage = self.step_stage or self.stage or "one stage"
        if not self.server:
            return f"server reports: {stage}"
        how = f"detected for {server_title(self.server)}" if self.stage_detected else "set or assumed in Connect…"
        declared = self._parts()[2]
        if declared != stage:
            how += f"; its numbers are after {declared}, which did not run here"
        return f"server reports: {stage} ({how})"

    def label(self) -> str:
        """The reply's origin in one line: ``tiny-llama · float32 · local`` or
        ``Gemma @ http://host:8080 · server reports: penalties (detected for mlx_lm.server)``
        (a server does not say what it computes in)."""
        name = self.model or "model not recorded"
        if self.remote:
            return f"{name} @ {self.source or 'server not recorded'} · {self.stage_words()}"
        return f"{name} · {self.precision or 'precision not recorded'} · {LOCAL}"

    def entropy_title(self) -> str | None:
        """The timeline's entropy plot title: a server sends no entropy; a local reply none."""
        return NOT_REPORTED_ENTROPY if self.remote else None
