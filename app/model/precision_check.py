"""Models → Check precision… in the model layer (Qt-free): the selected reply teacher-forced
in the running precision and in float32 (``EngineSession.check_fidelity``), its rows and
their summary kept per reply.

:class:`PrecisionChecks` is a :class:`app.model.reply_analysis.ReplyAnalysis`: the worker
sends back plain data — the rows (``engine.api.results.TokenFidelity``, frozen dataclasses of
numbers) and their summary (``engine.api.results.FidelitySummary``) — and the shell shows them
in ``app.views.precision_dialog``. A reply is checked as the reply to its prompt, a text
scored without one too (the check renders the chat; it does not tokenize the text again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.model.reply_analysis import Refusal, ReplyAnalysis
from app.model.reply_checks import ReplyReading
from app.store.compare_runs import StreamKey

if TYPE_CHECKING:
    from app.model.model_in_use import ModelInUse

RUNNING = "A precision check is running (Esc stops it)."
ALREADY_FLOAT32 = (
    "The model already computes in float32 with its KV cache unquantized: the check compares the "
    "running precision with float32, so it would find no difference. Choose float16 or bfloat16 "
    "(Models → Precision) or a quantized KV cache to check one."
)


@dataclass(frozen=True)
class PrecisionJob:
    tag: int
    messages: tuple[dict[str, str], ...]
    """The turns before the reply (its prompt)."""
    output: tuple[int, ...]
    """The reply's token ids."""


@dataclass(frozen=True)
class FidelityCheck:
    """One reply checked: ``rows[i]`` is token ``i`` (``TokenFidelity``)."""

    stream: StreamKey
    output: tuple[int, ...]
    pieces: tuple[str, ...]
    """Each token's text (the dialog names the rows with them)."""
    rows: tuple[Any, ...]
    summary: Any
    """``engine.api.results.FidelitySummary``: the precision checked, the largest differences."""

    def at(self, position: int) -> Any | None:
        return self.rows[position] if 0 <= position < len(self.rows) else None


class PrecisionChecks(ReplyAnalysis[PrecisionJob, FidelityCheck]):
    """The precision checks of one window's conversation model. Events: ``started(job)``,
    ``progressed(done, total)``, ``finished(check)``, ``failed(job, message)``, ``cancelled(job)``;
    events of a job cancelled meanwhile are dropped."""

    capability = "fidelity"
    verb = "check"
    select_hint = "Select a token of a reply to check that reply."
    running_words = RUNNING
    prompt_less = False

    def __init__(self, reading: ReplyReading, in_use: ModelInUse) -> None:
        super().__init__(reading, in_use)
        self._pieces: tuple[str, ...] = ()

    def model_problem(self, info: Any) -> str:
        """A float32 model with an unquantized KV cache runs both passes alike: said at once,
        not after a minute of computing zeros."""
        kv_bits = getattr(getattr(info, "kv", None), "bits", None)
        return ALREADY_FLOAT32 if info.precision == "float32" and kv_bits is None else ""

    def start(self) -> PrecisionJob | Refusal:
        """Start checking the selected reply (the job for the worker), or say why not."""
        target = self.target()
        if isinstance(target, Refusal):
            return target
        self._pieces = target.pieces
        job = PrecisionJob(self.next_tag(), target.messages or (), target.output)
        return self.begin(job, target.stream)

    def on_finished(self, tag: int, rows: list, summary: Any) -> FidelityCheck | None:
        pieces = self._pieces
        return self.keep(tag, lambda job: FidelityCheck(self.stream, job.output, pieces, tuple(rows), summary))
