"""An analysis of a saved reply, in the model layer (Qt-free): the one shape that Check
precision…, Compare models… and the logit lens share (and the next ones: draft-model
acceptance, grammar masks).

Each runs a saved reply of the loaded local model through the engine again and keeps what
it found per reply. What they share is here, once:

- **the target** (:class:`ReplyTarget`): the selected reply's stream, its token ids, and
  what the worker renders it from — the turns before it, or, for a text scored without a
  prompt, that text whole (``app.model.reply_checks.prompt_less_text``);
- **a typed refusal** (:class:`Refusal`) instead of a bare string: why the selection cannot
  be analysed (no model, the backend's capability, the reply's own problem, a job running);
- **a job** with a ``tag``, one at a time (``running``), whose late events are dropped once
  it is cancelled (:meth:`ReplyAnalysis.mine`);
- **results per reply** with **one staleness rule**: a result holds the token ids it was
  computed from (``output``) and is shown only while its stream still holds exactly those
  tokens (a deleted conversation's branch id may be given to a new reply), and a model load
  clears them all (:meth:`ReplyAnalysis.clear`);
- **the selection's result** in one shape: ``(result or None, the selected token's item or
  None)``.

An analysis subclasses :class:`ReplyAnalysis`, names its ``capability`` (the backend's flag,
``engine.api.capabilities``), ``verb`` and ``select_hint`` (the words of its refusals), and adds
its job and its event handlers; its result type follows :class:`ReplyResult`. One computed
from the reply's own steps (no engine, no job) subclasses :class:`StepAnalysis` instead and
writes :meth:`StepAnalysis.compute`; ``app/shell/controllers/step_analyses.py`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from app.model.events import EventEmitter, EventGroup
from app.model.reply_checks import ReplyReading, branch_of, prompt_less_text, selected_reply_problem
from app.store.compare_runs import StreamKey

if TYPE_CHECKING:
    from app.model.model_in_use import ModelInUse
    from engine.api.events import TokenStep

NO_MODEL = "No model is loaded."


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an analysis cannot start: the sentence shown in the status bar, a tooltip or a
    dialog. Returned (never raised) where the job would be, so a caller checks its type."""

    why: str

    def __str__(self) -> str:
        return self.why


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """The selected reply, as a job needs it."""

    stream: StreamKey
    output: tuple[int, ...]
    """The reply's token ids (a scored text's scored ones): the worker checks every token it
    reads against them, and a result keeps them (the staleness rule)."""
    messages: tuple[dict[str, str], ...] | None
    """The turns before the reply; None for a text scored without a prompt."""
    text: str | None
    """A text scored without a prompt, whole (its first token is the context); else None."""
    pieces: tuple[str, ...]
    """Each token's text, as the reply shows it."""


class ReplyResult(Protocol):
    """What an analysis keeps of one reply."""

    @property
    def output(self) -> tuple[int, ...]:
        """The token ids it was computed from."""
        ...

    def at(self, position: int) -> Any | None:
        """What it found at token ``position`` (None: nothing)."""
        ...


R = TypeVar("R", bound=ReplyResult)
J = TypeVar("J")


class AnalysisEvents(EventGroup):
    """What every analysis announces; an analysis with more declares a subclass."""

    started: EventEmitter[[Any]]
    """(job): a job was sent to the worker."""
    progressed: EventEmitter[[int, int]]
    """(done, total) of the running job."""
    finished: EventEmitter[[Any]]
    """(the result, or the job for an analysis whose results arrive piece by piece)."""
    failed: EventEmitter[[Any, str]]
    """(job, what went wrong, in words)."""
    cancelled: EventEmitter[[Any]]
    """(job)."""


class ReplyAnalysis(Generic[J, R]):
    """One window's analysis of its conversation's replies: the job running and the results.
    ``events``: ``started(job)``, ``progressed(done, total)``, ``finished(result or job)``,
    ``failed(job, message)``, ``cancelled(job)``, and those a subclass names."""

    capability = ""
    """The backend's capability it needs (``Capabilities.reason`` says why not)."""
    verb = "analyse"
    """The reply's problems in its words ("… load it to compare the reply")."""
    select_hint = "Select a token of a reply."
    no_model = NO_MODEL
    running_words = ""
    """Why another job cannot start while one runs ("": starting one replaces it)."""
    prompt_less = True
    """It can analyse a text scored without a prompt (the worker tokenizes it again)."""

    events_type: ClassVar[type[AnalysisEvents]] = AnalysisEvents
    """The analysis's events: :class:`AnalysisEvents`, or a subclass declaring its own too."""

    def __init__(self, reading: ReplyReading, in_use: ModelInUse) -> None:
        self.reading, self.in_use = reading, in_use
        self.events = self.events_type()
        self.results: dict[StreamKey, R] = {}
        self.running: J | None = None
        self.stream: StreamKey | None = None
        """The running job's reply."""
        self._tag = 0

    # What can be analysed ----------------------------------------------------------------

    def refusal(self) -> Refusal | None:
        """Why the selected reply cannot be analysed now (None when it can)."""
        info = self.in_use.info
        if info is None:
            return Refusal(self.no_model)
        if self.capability and (why := info.capabilities.reason(self.capability)):
            return Refusal(why)
        if why := self.model_problem(info):
            return Refusal(why)
        if self.running is not None and self.running_words:
            return Refusal(self.running_words)
        problem = selected_reply_problem(self.reading, info.name, self.verb, self.select_hint)
        return Refusal(problem) if problem else None

    def model_problem(self, info: Any) -> str:
        """Why the loaded model (``info``, an ``engine.api.backend.ModelInfo``) has nothing for
        this analysis to find, whatever reply is selected ("" when it has)."""
        return ""

    def unavailable(self) -> str:
        """:meth:`refusal` in words ("" when the selected reply can be analysed)."""
        refusal = self.refusal()
        return refusal.why if refusal is not None else ""

    def target(self) -> ReplyTarget | Refusal:
        """The selected reply as a job needs it, or why it cannot be analysed."""
        if (refusal := self.refusal()) is not None:
            return refusal
        reading = self.reading
        stream = reading.selection[0]
        message = reading.message_of(stream)
        steps = reading.steps_of(stream)
        output = tuple(s.token_id for s in steps)
        pieces = tuple(s.piece for s in steps)
        text = prompt_less_text(reading, message, branch_of(reading, stream)) if self.prompt_less else None
        if text is not None:
            return ReplyTarget(stream, output, None, text, pieces)
        return ReplyTarget(stream, output, reading.context_for(message), None, pieces)

    def next_tag(self) -> int:
        self._tag += 1
        return self._tag

    # Running ---------------------------------------------------------------------------------

    def begin(self, job: J, stream: StreamKey) -> J:
        """``job`` (made from :meth:`target`) is the running one."""
        self.running, self.stream = job, stream
        self.events.started(job)
        return job

    def mine(self, tag: int) -> bool:
        """An event of the running job (one of a job cancelled meanwhile is dropped)."""
        return self.running is not None and self.running.tag == tag

    def end(self) -> J | None:
        """The running job is over (finished, failed): the job."""
        job, self.running = self.running, None
        return job

    def keep(self, tag: int, result_of: Callable[[J], R]) -> R | None:
        """The running job ``tag`` finished: its result (``result_of(job)``) is kept for its
        reply and announced (None: the event was another job's)."""
        if not self.mine(tag):
            return None
        result = result_of(self.end())
        self.results[self.stream] = result
        self.events.finished(result)
        return result

    def on_progress(self, tag: int, done: int, total: int) -> None:
        if self.mine(tag):
            self.events.progressed(done, total)

    def on_failed(self, tag: int, message: str) -> None:
        """A refusal or a failure of the running job: nothing else changes."""
        if self.mine(tag):
            self.events.failed(self.end(), message)

    def cancel(self) -> J | None:
        """Drop the running job (its late events are ignored; what it found stays); the job,
        or None."""
        job = self.end()
        if job is not None:
            self.events.cancelled(job)
        return job

    def clear(self) -> None:
        """Another model is in use: what was found belongs to the one before."""
        self.cancel()
        self.results.clear()

    # What the views show ------------------------------------------------------------------------

    def of(self, stream: StreamKey | None) -> R | None:
        """``stream``'s result while the stream still holds the tokens it was computed from."""
        found = self.results.get(stream) if stream is not None else None
        if found is None:
            return None
        steps = self.reading.steps_of(stream)
        if steps is None or tuple(s.token_id for s in steps) != found.output:
            return None
        return found

    def selected(self) -> tuple[R | None, Any | None]:
        """The selected reply's result and what it found at the selected token (None: none)."""
        selection = self.reading.selection
        found = self.of(selection[0]) if selection is not None else None
        return found, (found.at(selection[1]) if found is not None else None)


class StepAnalysis(ReplyAnalysis[None, R]):
    """An analysis computed from the selected reply's own steps (``TokenStep``, already in
    the app): no model, no job. A result is computed when first asked for and kept under the
    same staleness rule, so a reply still being written is computed again as it grows."""

    TITLE = ""
    """Its menu item (checkable: the row is shown while it is checked)."""
    TIP = ""

    def refusal(self) -> Refusal | None:
        selection = self.reading.selection
        if selection is None or not self.reading.steps_of(selection[0]):
            return Refusal(self.select_hint)
        return None

    def compute(self, stream: StreamKey, steps: Sequence[TokenStep]) -> R:
        """The result of ``stream``'s ``steps`` (``output`` their token ids)."""
        raise NotImplementedError

    def selected(self) -> tuple[R | None, Any | None]:
        """The selected reply's result (computed now if it is not known or stale)."""
        if self.refusal() is not None:
            return None, None
        stream, index = self.reading.selection
        found = self.of(stream)
        if found is None:
            found = self.results[stream] = self.compute(stream, self.reading.steps_of(stream))
        return found, found.at(index)
