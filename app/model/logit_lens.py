"""The logit lens in the model layer, Qt-free: what each layer of the running
model would have predicted at a token of a saved reply (or of a scored text).

The worker reads a reply's tokens layer by layer (``EngineSession.lens_reply``, or
``lens_text`` for a text scored without a prompt, tokenized again as Compare models does)
and sends back plain data, one position at a time: ``engine.api.results.LensPosition`` objects
(frozen dataclasses of numbers and tuples — the app never imports ``engine.analysis.lens``, which
loads MLX; attributes ``position``, ``chosen``, ``chosen_is_next``, ``decided_at`` and
``layers``, each layer's ``layer``, ``top``, ``entropy``, ``kl_final``,
``rank_final_top1``, ``rank_chosen``, ``chosen_logprob``) and the text of each token
they name. :class:`LogitLens` keeps them per reply and position (:class:`ReplyLens`), so a
token selected again is shown at once, reacts to the worker's events as
:class:`app.model.model_compare.ModelComparisons` does, and says why a reply cannot be read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.model.events import EventEmitter
from app.model.reply_analysis import AnalysisEvents, Refusal, ReplyAnalysis
from app.model.reply_checks import ReplyReading
from app.store.compare_runs import StreamKey

if TYPE_CHECKING:
    from app.model.model_in_use import ModelInUse

TOP = 20
"""Tokens kept per layer and position (the engine's ``top``): what the heat map can show of
a layer besides the chosen token, whose probability every layer reports. A candidate outside
a layer's top 20 is drawn as below the 20th there. Twenty, not a hundred: the timeline's job
keeps every token's layers (``(L + 1) × TOP`` pairs each)."""
NO_MODEL = "No model is loaded: the logit lens reads the running model's own layers."
SELECT = "Select a token of a reply or a scored text: what each layer would have predicted there shows here."
WAITS_FOR_REPLY = "waits for the reply being written: a reply goes first, the read-out starts when it ends."
RUNNING_EVERY = "The logit lens of every token of a reply is being read: Cancel (or Esc) stops it."
CANCELLED = "Cancelled."


@dataclass(frozen=True)
class LensJob:
    """Read ``positions`` of a reply (None: every token) through every layer."""

    tag: int
    output: tuple[int, ...]
    """The reply's token ids (a scored text's scored ones): every position is checked against them."""
    positions: tuple[int, ...] | None
    messages: tuple[dict[str, str], ...] | None = None
    """The turns before the reply (``lens_reply``); None for a text scored without a prompt."""
    text: str | None = None
    """A text scored without a prompt (``lens_text``: its first token is the context)."""
    top: int = TOP

    @property
    def every(self) -> bool:
        return self.positions is None

    @property
    def total(self) -> int:
        return len(self.output) if self.positions is None else len(self.positions)

    def covers(self, position: int) -> bool:
        return 0 <= position < len(self.output) if self.positions is None else position in self.positions


@dataclass
class ReplyLens:
    """What is known of one reply's logit lens: its read positions, and the text of every
    token they name. Computed under the running model: a model load clears them all."""

    stream: StreamKey
    output: tuple[int, ...]
    rows: dict[int, Any] = field(default_factory=dict)
    """position → ``engine.api.results.LensPosition``."""
    texts: dict[int, str] = field(default_factory=dict)
    every: bool = False
    """A job over every token was started for it: the timeline shows its row."""

    def piece(self, token_id: int) -> str:
        return self.texts.get(token_id, f"⟨{token_id}⟩")

    def at(self, position: int) -> Any | None:
        return self.rows.get(position)

    @property
    def layers(self) -> int:
        """L: the last layer's number (layer 0 is the embedding output); 0 before any row."""
        row = next(iter(self.rows.values()), None)
        return len(row.layers) - 1 if row is not None else 0

    def ordered(self) -> list[Any]:
        return [self.rows[p] for p in sorted(self.rows)]

    def decided(self) -> tuple[list[int], list[int | None]]:
        """Each read position and the layer its token was decided at (None: never the top token)."""
        positions = sorted(self.rows)
        return positions, [self.rows[p].decided_at for p in positions]


class LensEvents(AnalysisEvents):
    position: EventEmitter[[StreamKey, Any]]
    """(reply, ``engine.api.results.LensPosition``): one position read."""


class LogitLens(ReplyAnalysis[LensJob, ReplyLens]):
    """The lens of one window's conversation model (a :class:`ReplyAnalysis`): the job
    running, and what each reply's jobs read. Events: ``started(job)``, ``position(stream,
    row)``, ``progressed(done, total)``, ``finished(job)``, ``failed(job, message)``,
    ``cancelled(job)``; the events of a job cancelled meanwhile are dropped."""

    events_type = LensEvents

    capability = "logit_lens"
    verb = "read"
    select_hint = SELECT
    no_model = NO_MODEL

    def __init__(self, reading: ReplyReading, in_use: ModelInUse) -> None:
        super().__init__(reading, in_use)
        self.declined: dict[tuple[StreamKey, int], str] = {}
        """(stream, position) → why its read-out stopped (a failure, a cancel): the Layers
        tab says so instead of starting it again until asked (:meth:`forget_declined`)."""
        self._done = 0

    # What can be read ---------------------------------------------------------------------

    def every_unavailable(self) -> str:
        """Why the menu's "every token" cannot start now ("" when it can)."""
        if self.running is not None and self.running.every:
            return RUNNING_EVERY
        return self.unavailable()

    def progress(self) -> tuple[int, int]:
        """(positions read, positions asked for) of the running job; (0, 0) when none runs."""
        job = self.running
        return (self._done, job.total) if job is not None else (0, 0)

    def covers(self, stream: StreamKey, position: int) -> bool:
        """The running job will read ``position`` of ``stream`` (and has not yet)."""
        job = self.running
        return job is not None and self.stream == stream and job.covers(position)

    # Running ---------------------------------------------------------------------------------

    def start(self, positions: tuple[int, ...] | None) -> LensJob | Refusal:
        """Read ``positions`` (None: every token) of the selected reply: the job for the
        worker, or why not. The caller cancels a job still running first."""
        target = self.target()
        if isinstance(target, Refusal):
            return target
        stream, output = target.stream, target.output
        job = LensJob(self.next_tag(), output, positions, messages=target.messages, text=target.text)
        found = self.of(stream)
        if found is None:
            found = self.results[stream] = ReplyLens(stream, output)
        found.every = found.every or job.every
        for position in positions or range(len(output)):
            self.declined.pop((stream, position), None)
        self._done = 0
        return self.begin(job, stream)

    def cancel(self, by_user: bool = False) -> LensJob | None:
        """Drop the running job (its late events are ignored; what it read stays); the job,
        or None. ``by_user``: the positions it had left are not started again by themselves."""
        job = self.running
        if job is not None and by_user and not job.every:
            for position in job.positions:
                self.declined[(self.stream, position)] = CANCELLED
        return super().cancel()

    def forget_declined(self, stream: StreamKey, position: int) -> None:
        self.declined.pop((stream, position), None)

    def clear(self) -> None:
        """Another model is in use: what was read belongs to the one before."""
        super().clear()
        self.declined.clear()

    def on_position(self, tag: int, row: Any, texts: dict[int, str]) -> None:
        """One position read (``engine.api.results.LensPosition``) and the texts of its new tokens."""
        if not self.mine(tag):
            return
        found = self.results.get(self.stream)
        if found is None:  # cleared meanwhile
            return
        found.texts.update(texts)
        found.rows[row.position] = row
        self._done += 1
        total = self.running.total  # read first: a listener of ``position`` may cancel the job
        self.events.position(self.stream, row)
        if self.mine(tag):
            self.events.progressed(self._done, total)

    def on_finished(self, tag: int) -> None:
        if self.mine(tag):
            self.events.finished(self.end())

    def on_failed(self, tag: int, message: str) -> None:
        """The engine refused or failed: the positions it had left say so, nothing else changes."""
        if not self.mine(tag):
            return
        job = self.end()
        found = self.results.get(self.stream)
        for position in job.positions or range(len(job.output)):
            if found is None or position not in found.rows:
                self.declined[(self.stream, position)] = message
        self.events.failed(job, message)
