"""Models → Compare models… in the model layer, Qt-free: a saved reply (or a
scored text) under the running model and a second one, token by token.

The worker loads the second model beside the running one (``EngineSession.load_second``)
and scores the reply's own tokens under both (``compare_reply``, or ``compare_text`` for a
text scored without a prompt); it reports back plain rows (``engine.api.results.TokenKLD``: KL(running
‖ second) over the whole vocabulary, both top lists) and the text of every token they name.
:class:`ModelComparisons`, a :class:`app.model.reply_analysis.ReplyAnalysis`, holds one
:class:`Comparison` per compared reply and says why a reply cannot be compared. The
statistics and the export records are the engine's own
(:mod:`engine.api.kld_records`), so the app's numbers are ``python -m engine kld``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.model.events import EventEmitter
from app.model.kv_cache import CHOICE_LABELS as KV_LABELS
from app.model.kv_cache import OFF, kv_label, kv_setting, second_kv_label
from app.model.reply_analysis import AnalysisEvents, Refusal, ReplyAnalysis
from app.model.reply_checks import ReplyReading
from app.store.compare_runs import StreamKey
from engine.api.kld_records import statistics, summary_record, token_record
from engine.api.kld_stats import UNCERTAINTY_MIN_TOKENS
from engine.api.kv_quantization import KV_OFF
from engine.api.precision import AUTO

if TYPE_CHECKING:
    from app.model.model_in_use import ModelInUse

TOP = 10
"""Top tokens kept per model and position: what the inspector lists side by side."""
CHUNK = 64
"""Tokens per forward pass: ``python -m engine kld``'s default, so the numbers are its own."""
WORST = 5
"""The tokens the timeline marks: the largest KL divergences."""
RUNNING = "A comparison is running: Cancel in its dialog stops it."


@dataclass(frozen=True)
class CompareSettings:
    """The second model: where it comes from and how it computes, its KV cache included
    (``kv_bits``: 0 off, else 8 or 4, as Models → KV cache offers). A further load setting
    becomes a field here, in :meth:`load_options` and in :meth:`words`; the worker passes
    :meth:`load_options` to ``load_second`` as they are. The running model's own source and
    precision with another KV cache shares its weights in the engine (nothing is loaded)."""

    source: str
    precision: str = AUTO
    kv_bits: int = OFF

    def load_options(self) -> dict[str, Any]:
        return {"precision": self.precision, "kv": kv_setting(self.kv_bits)}

    def words(self) -> str:
        kv = f", KV cache {KV_LABELS.get(self.kv_bits, f'{self.kv_bits}-bit')}" if self.kv_bits else ""
        return f"{self.source} ({self.precision}{kv})"


@dataclass(frozen=True)
class CompareJob:
    """Load ``settings`` beside the running model, then score ``output`` under both."""

    tag: int
    settings: CompareSettings
    output: tuple[int, ...]
    """The reply's token ids (a scored text's scored ones): every row is checked against them."""
    messages: tuple[dict[str, str], ...] | None = None
    """The turns before the reply (``compare_reply``); None for a text scored without a prompt."""
    text: str | None = None
    """A text scored without a prompt (``compare_text``: its first token is the context)."""
    top: int = TOP
    chunk: int = CHUNK


@dataclass(frozen=True)
class ModelIdentity:
    """One side of a comparison, as its labels name it."""

    name: str
    precision: str
    source: str = ""
    kv: str = ""
    """Its KV cache when quantized, as the status bar names it (``KV 8-bit``); "" when not."""

    @property
    def label(self) -> str:
        label = f"{self.name} · {self.precision}" if self.precision else self.name
        return f"{label} · {self.kv}" if self.kv else label


@dataclass
class Comparison:
    """One reply under both models: ``rows[i]`` is token ``i`` (``engine.api.results.TokenKLD``)."""

    stream: StreamKey
    settings: CompareSettings
    base: ModelIdentity
    second: ModelIdentity
    rows: list[Any]
    texts: dict[int, str]
    stats: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.stats = statistics(self.rows)

    def piece(self, token_id: int) -> str:
        return self.texts.get(token_id, f"⟨{token_id}⟩")

    def row_at(self, index: int) -> Any | None:
        return self.rows[index] if 0 <= index < len(self.rows) and self.rows[index].index == index else None

    at = row_at

    @property
    def output(self) -> tuple[int, ...]:
        """The compared token ids (the staleness rule of ``ReplyAnalysis.of``)."""
        return tuple(r.token_id for r in self.rows)

    def worst(self, k: int = WORST) -> list[Any]:
        """The ``k`` rows of largest KL divergence, the largest first (ties: the earlier)."""
        return sorted(self.rows, key=lambda r: (-r.kld, r.index))[:k]

    @property
    def title(self) -> str:
        return f"KL({self.base.label} ‖ {self.second.label})"

    def about(self) -> dict[str, str]:
        """The summary record's names, as ``python -m engine kld`` writes them: the second
        model's ``kv_bits`` (None when off), ``kv_group_size`` and ``quantized_kv_start`` too."""
        return {
            "base": self.base.name,
            "base_precision": self.base.precision,
            "model": self.second.name,
            "precision": self.second.precision,
            **(kv_setting(self.settings.kv_bits) or KV_OFF).to_dict(),
        }

    def records(self) -> list[dict]:
        """``python -m engine kld``'s records for these tokens: one ``token`` each, a ``summary``."""
        tokens = [token_record(row, self.piece) for row in self.rows]
        return [*tokens, summary_record(self.rows, self.about(), interrupted=False)]

    def summary_line(self) -> str:
        """The status bar's and the dialog's line (llama-perplexity's numbers)."""
        s = self.stats
        p99 = s["kld_percentiles"].get("p99", 0.0)
        return (
            f"{self.base.label} vs {self.second.label}: "
            f"mean KLD {num(s['kld_mean'])} {plus_minus(s['kld_mean_se'])} nats · 99th pct {num(p99)} · "
            f"max {num(s['kld_max'])} · same top {100 * s['same_top']:.1f}% · "
            f"RMS Δp {100 * s['dp_rms']:.2f}% · PPL {num(s['ppl_base'])} vs {num(s['ppl_model'])} "
            f"(ratio {s['ppl_ratio']:.4f}) · {s['tokens']} tokens"
        )


def plus_minus(se: float | None, form: Callable[[float], str] | None = None) -> str:
    """ "± <se>" in ``form`` (``num`` unless given); where the summary has no uncertainty (under
    ``UNCERTAINTY_MIN_TOKENS`` tokens: llama-perplexity's rule), it says so rather than "± 0"."""
    if se is None:
        return f"(± needs {UNCERTAINTY_MIN_TOKENS} tokens)"
    return f"± {(form or num)(se)}"


def num(value: float) -> str:
    """Three significant digits; a divergence of 1e-5 stays readable (``1.23e-05``)."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.3g}"


class ComparisonEvents(AnalysisEvents):
    loading: EventEmitter[[str, float]]
    """(stage, fraction) of the second model's load."""
    loaded: EventEmitter[[Any]]
    """(the second model's identity): loaded beside the running one."""


class ModelComparisons(ReplyAnalysis[CompareJob, Comparison]):
    """The comparisons of one window's conversation model (a :class:`ReplyAnalysis`): the
    one running, and each done.

    Events: ``started(job)``, ``loading(stage, fraction)``, ``loaded(second)``,
    ``progressed(done, total)``, ``finished(comparison)``, ``failed(job, message)``,
    ``cancelled(job)``; events of a job cancelled meanwhile are dropped."""

    events_type = ComparisonEvents

    capability = "compare_models"
    verb = "compare"
    select_hint = "Select a token of a reply or a scored text to compare it."
    running_words = RUNNING

    def __init__(self, reading: ReplyReading, in_use: ModelInUse) -> None:
        super().__init__(reading, in_use)
        self._base: ModelIdentity | None = None
        self._second: ModelIdentity | None = None

    def job_for(self, settings: CompareSettings) -> CompareJob | Refusal:
        """The job comparing the selected reply with ``settings``' model, or why there is none."""
        target = self.target()
        if isinstance(target, Refusal):
            return target
        return CompareJob(self.next_tag(), settings, target.output, messages=target.messages, text=target.text)

    # Running --------------------------------------------------------------------------------

    def start(self, settings: CompareSettings) -> CompareJob | Refusal:
        """Start comparing the selected reply (the job for the worker), or say why not."""
        job = self.job_for(settings)
        if isinstance(job, Refusal):
            return job
        info = self.in_use.info
        self._base = ModelIdentity(info.name, info.precision, self.in_use.source or "", kv_label(info.kv))
        self._second = None
        return self.begin(job, self.reading.selection[0])

    def on_loading(self, tag: int, stage: str, fraction: float) -> None:
        if self.mine(tag):
            self.events.loading(stage, fraction)

    def on_loaded(self, tag: int, second: Any) -> None:
        """The worker's ``SecondModel`` (name, source, precision, KV cache)."""
        if self.mine(tag):
            kv = second_kv_label(getattr(second, "kv", ""))
            self._second = ModelIdentity(second.name, second.precision, second.source, kv)
            self.events.loaded(self._second)

    def on_finished(self, tag: int, rows: list, texts: dict[int, str]) -> Comparison | None:
        if self._second is None:
            return None
        base, second = self._base, self._second
        return self.keep(tag, lambda job: Comparison(self.stream, job.settings, base, second, list(rows), dict(texts)))
