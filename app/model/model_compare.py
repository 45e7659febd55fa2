"""Models → Compare models… (issue 21) in the model layer, Qt-free: a saved reply (or a
scored text) under the running model and a second one, token by token.

The worker loads the second model beside the running one (``EngineSession.load_second``)
and scores the reply's own tokens under both (``compare_reply``, or ``compare_text`` for a
text scored without a prompt); it reports back plain rows (``engine.api.results.TokenKLD``: KL(running
‖ second) over the whole vocabulary, both top lists) and the text of every token they name.
:class:`ModelComparisons` holds one :class:`Comparison` per compared reply, reacts to the
worker's events as :class:`app.model.scoring.Scoring` does, and says why a reply cannot be
compared. The statistics and the export records are the engine's own
(:mod:`engine.api.kld_records`), so the app's numbers are ``python -m engine kld``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.model.events import EmitterGroup
from app.model.kv_cache import CHOICE_LABELS as KV_LABELS
from app.model.kv_cache import OFF, kv_label, kv_setting, second_kv_label
from app.model.reply_checks import branch_of, prompt_less_text, selected_reply_problem
from app.model.streams import StreamKey
from engine.api.kld_records import statistics, summary_record, token_record
from engine.api.kv_quantization import KV_OFF
from engine.api.precision import AUTO

if TYPE_CHECKING:
    from app.model.chat import ChatModel
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
            f"mean KLD {num(s['kld_mean'])} ± {num(s['kld_mean_se'])} nats · 99th pct {num(p99)} · "
            f"max {num(s['kld_max'])} · same top {100 * s['same_top']:.1f}% · "
            f"RMS Δp {100 * s['dp_rms']:.2f}% · PPL {num(s['ppl_base'])} vs {num(s['ppl_model'])} "
            f"(ratio {s['ppl_ratio']:.4f}) · {s['tokens']} tokens"
        )


def num(value: float) -> str:
    """Three significant digits; a divergence of 1e-5 stays readable (``1.23e-05``)."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.3g}"


class ModelComparisons:
    """The comparisons of one window's conversation model: the one running, and each done.

    Events: ``started(job)``, ``loading(stage, fraction)``, ``loaded(second)``,
    ``progressed(done, total)``, ``finished(comparison)``, ``failed(message)``,
    ``cancelled(job)``; events of a job cancelled meanwhile are dropped."""

    def __init__(self, chat: ChatModel, in_use: ModelInUse) -> None:
        self.chat, self.in_use = chat, in_use
        self.events = EmitterGroup("started", "loading", "loaded", "progressed", "finished", "failed", "cancelled")
        self.results: dict[StreamKey, Comparison] = {}
        self.running: CompareJob | None = None
        self._stream: StreamKey | None = None
        self._base: ModelIdentity | None = None
        self._second: ModelIdentity | None = None
        self._tag = 0

    # What can be compared ----------------------------------------------------------------------

    def unavailable(self) -> str:
        """Why the selected reply cannot be compared now ("" when it can)."""
        info, model = self.in_use.info, self.chat
        if info is None:
            return "No model is loaded."
        if not info.capabilities.compare_models:
            return info.capabilities.reason("compare_models")
        if self.running is not None:
            return RUNNING
        hint = "Select a token of a reply or a scored text to compare it."
        return selected_reply_problem(model, info.name, "compare", hint)

    def job_for(self, settings: CompareSettings) -> CompareJob | str:
        """The job comparing the selected reply with ``settings``' model, or why there is none."""
        if reason := self.unavailable():
            return reason
        model = self.chat
        stream = model.selection[0]
        message = model.message_of(stream)
        branch = branch_of(model, stream)
        output = tuple(s.token_id for s in model.steps_of(stream))
        self._tag += 1
        if (text := prompt_less_text(model, message, branch)) is not None:
            return CompareJob(self._tag, settings, output, text=text)
        return CompareJob(self._tag, settings, output, messages=model.context_for(message))

    # Running --------------------------------------------------------------------------------

    def start(self, settings: CompareSettings) -> CompareJob | str:
        """Start comparing the selected reply (the job for the worker), or say why not."""
        job = self.job_for(settings)
        if isinstance(job, str):
            return job
        info = self.in_use.info
        self.running, self._stream = job, self.chat.selection[0]
        self._base = ModelIdentity(info.name, info.precision, self.in_use.source or "", kv_label(info.kv))
        self._second = None
        self.events.started(job)
        return job

    def cancel(self) -> CompareJob | None:
        """Drop the running comparison (its late events are ignored); the job, or None."""
        job, self.running = self.running, None
        if job is not None:
            self.events.cancelled(job)
        return job

    def _mine(self, tag: int) -> bool:
        return self.running is not None and self.running.tag == tag

    def on_loading(self, tag: int, stage: str, fraction: float) -> None:
        if self._mine(tag):
            self.events.loading(stage, fraction)

    def on_loaded(self, tag: int, second: Any) -> None:
        """The worker's ``SecondModel`` (name, source, precision, KV cache)."""
        if self._mine(tag):
            kv = second_kv_label(getattr(second, "kv", ""))
            self._second = ModelIdentity(second.name, second.precision, second.source, kv)
            self.events.loaded(self._second)

    def on_progress(self, tag: int, done: int, total: int) -> None:
        if self._mine(tag):
            self.events.progressed(done, total)

    def on_finished(self, tag: int, rows: list, texts: dict[int, str]) -> Comparison | None:
        if not self._mine(tag) or self._second is None:
            return None
        job, self.running = self.running, None
        result = Comparison(self._stream, job.settings, self._base, self._second, list(rows), dict(texts))
        self.results[self._stream] = result
        self.events.finished(result)
        return result

    def on_failed(self, tag: int, message: str) -> None:
        """A refusal (it would not fit, another vocabulary) or a failure: nothing changes."""
        if self._mine(tag):
            self.running = None
            self.events.failed(message)

    # What the views show --------------------------------------------------------------------

    def of(self, stream: StreamKey | None) -> Comparison | None:
        """``stream``'s comparison while the stream still holds the compared tokens (a
        deleted conversation's branch id may be given to a new reply)."""
        found = self.results.get(stream) if stream is not None else None
        steps = self.chat.steps_of(stream) if found is not None else None
        if found is None or steps is None or len(steps) != len(found.rows):
            return None
        return found if all(s.token_id == r.token_id for s, r in zip(steps, found.rows, strict=True)) else None

    def selected(self) -> tuple[Comparison, Any | None] | None:
        """The selected reply's comparison and the selected token's row (None: not compared)."""
        selection = self.chat.selection
        found = self.of(selection[0]) if selection is not None else None
        return (found, found.row_at(selection[1])) if found is not None else None
