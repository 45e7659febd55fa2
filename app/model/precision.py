"""The compute precision from the app's side, Qt-free: the choice saved per model,
and the words the Precision menu, the status bar, the About box, the inspector and the
Check precision dialog use.

The engine decides what a choice means (``engine.api.precision``: ``auto`` is float32 unless
float32 would not fit in memory); the app only remembers the choice for each model source
and says what a model, or a saved reply, was computed in.
"""

from __future__ import annotations

from typing import Any

from app.model.kv_cache import about_kv, kv_label
from app.model.per_model import PerModelChoice
from engine.api.precision import AUTO, FIDELITY_TOLERANCE, PRECISIONS

SETTINGS_KEY = "precision_by_model"
"""QSettings key: a JSON object, model source -> choice (a source may hold slashes, which
QSettings would read as groups, so the sources are not keys of their own)."""
NOT_RECORDED = "not recorded"
SERVER_CHOOSES = "A server computes in the precision it was started with: the server chooses."

CHOICE_LABELS = {
    AUTO: "Auto (recommended)",
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
}
CHOICE_TIPS = {
    AUTO: "float32 where it fits in memory (every logprob within "
    f"{FIDELITY_TOLERANCE} nats of the model's), else the precision the weights are stored in.",
    "float32": "Full precision: the numbers shown are the model's. Uses more memory than half precision.",
    "float16": "Half precision: less memory, but logprobs can move by more than "
    f"{FIDELITY_TOLERANCE} nats (Gemma by up to 2.3). Check precision… measures it.",
    "bfloat16": "Half precision with float32's range and fewer digits: logprobs can move by more than "
    f"{FIDELITY_TOLERANCE} nats. Check precision… measures it.",
}


CHOICE = PerModelChoice(SETTINGS_KEY, PRECISIONS, AUTO, "precision", CHOICE_LABELS, CHOICE_TIPS)
read_choices, choice_for, with_choice = CHOICE.read, CHOICE.choice_for, CHOICE.with_choice


def precision_words(precision: str | None) -> str:
    """A reply's or a model's precision, or "not recorded" ("" and None: not known)."""
    return precision or NOT_RECORDED


def model_label(info: Any) -> str:
    """The status bar's words for a local model: ``SmolLM2 · float32``, and its KV cache when
    that is quantized (``SmolLM2 · float32 · KV 8-bit``)."""
    if not getattr(info, "precision", ""):
        return info.name
    kv = kv_label(getattr(info, "kv", None))
    return f"{info.name} · {info.precision}" + (f" · {kv}" if kv else "")


def about_precision(info: Any) -> str:
    """The About box's line: what the model computes in, what was asked, and why."""
    if not getattr(info, "precision", ""):
        return "Precision: chosen by the server (not reported)."
    asked = f" ({info.precision_choice})" if info.precision_choice and info.precision_choice != info.precision else ""
    reason = f": {info.precision_reason}" if info.precision_reason else ""
    kv = about_kv(getattr(info, "kv", None))
    return f"Computes in {info.precision}{asked}{reason}." + (f" {kv}" if kv else "")


def verdict(summary: Any) -> str:
    """The check's answer in plain words, and what to do when the numbers are off."""
    tol = summary.tolerance
    if summary.within_tolerance:
        return (
            f"Within {tol} nats of float32: computed in {summary.precision}, every top-5 logprob of this "
            "reply is the model's own to within that tolerance."
        )
    return (
        f"Not within {tol} nats of float32: in {summary.precision} a top-5 logprob moved by up to "
        f"{summary.top5_max_diff:.3f} nats. To see the model's own numbers, choose Models → Precision → "
        "Auto (recommended) or float32 and send the reply again."
    )


def worst_first(rows: list) -> list:
    """The rows by their largest top-5 difference, then KL, the worst first."""
    return sorted(rows, key=lambda r: (r.top5_max_diff, r.kld), reverse=True)
