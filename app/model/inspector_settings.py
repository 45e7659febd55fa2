"""The settings in force for the inspected token, and what the inspector's numbers mean.

``settings_line`` is the compact line under the inspector's header (every
``SamplingParams`` field that differs from its default, the seed first: what a person
needs to reproduce the token); ``settings_tooltip`` lists every field. The notes are
the tooltips that explain two numbers new users misread: a greedy token's ``final``
probability (not 100 %) and the penalty counts (the prompt counts too).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from app.model.precision import precision_words
from app.model.textfmt import escape, visible
from engine.api.params import SamplingParams
from engine.specs.registry import FIELD_STAGE, SPECS

DEFAULTS = SamplingParams()

GREEDY_NOTE = (
    "Greedy (temperature 0): the token drawn is the most likely one entering the "
    "temperature stage, so it was certain to be drawn. For inspection the temperature "
    "stage divides a greedy row by 1 (and ignores dynamic temperature), so the stages "
    "from temperature on show the model's own confidence: p final is the token's "
    "probability after the last stage that ran, not 100 %."
)
FINAL_NOTE = (
    "p final: the probability after the last stage of the chain that ran — the "
    "distribution the token was drawn from. " + GREEDY_NOTE
)
FORCED_NOTE = "Picked by hand: the token was forced, not drawn; p final is what the chain gave it."
COUNT_NOTE = (
    "count: occurrences of the token in the last penalty_window tokens of prompt + output "
    "(0 = all of them). The prompt — chat template and system prompt included — counts "
    "too, so a token can be penalized before the reply ever wrote it."
)
PENALTY_NOTE = "penalty: the change of the logit made by the penalties stage (repetition, presence, frequency)."
DRY_NOTE = (
    "dry: the change of the logit made by the dry stage: a token that would extend a repeat "
    "loses multiplier · base^(length − allowed length)."
)
TEMPERATURE_NOTE = (
    "temperature divides every logit by T rather than shifting some: its effect is in the "
    "Chain tab's temperature column."
)


def _value(name: str, value: Any) -> str:
    """One field's value, short: floats with %g, breakers and stops escaped."""
    if isinstance(value, float):
        return f"{value:g}"
    if name == "logit_bias":
        items = sorted(value.items())
        shown = ", ".join(f"{k}: {v:+g}" for k, v in items[:4])
        return "{" + shown + (f", … ({len(items)} ids)" if len(items) > 4 else "") + "}"
    if name == "samplers":
        return " → ".join(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(repr(visible(v)) for v in value) + "]"
    return "random" if value is None else str(value)


def changed_fields(params: SamplingParams) -> list[str]:
    """The fields that differ from their defaults, in the dataclass's order."""
    return [f.name for f in fields(SamplingParams) if getattr(params, f.name) != getattr(DEFAULTS, f.name)]


def unticked(name: str, params: SamplingParams) -> bool:
    """Whether ``name`` is a field of a stage left out of ``samplers`` (unticked in the chain
    editor): its value is kept for when the stage is ticked again but does nothing."""
    stage = FIELD_STAGE.get(name)
    return stage is not None and SPECS[stage].reorderable and stage not in params.samplers


def settings_line(params: SamplingParams) -> str:
    """``seed 3 · temperature 0.8 · top_k 8 · …``: the seed, then every non-default
    field of a stage in the chain (temperature 0 reads ``greedy``; an unticked stage's
    kept values are left out, the ``samplers`` field says it is not in the chain)."""
    parts = [f"seed {_value('seed', params.seed)}"]
    if params.greedy:
        parts.append("greedy")
    for name in changed_fields(params):
        if name != "seed" and not unticked(name, params):
            parts.append(f"{name} {_value(name, getattr(params, name))}")
    return " · ".join(parts)


def settings_tooltip(params: SamplingParams) -> str:
    """Every field of ``params`` (rich text), the changed ones in bold."""
    changed = set(changed_fields(params))
    rows = []
    for f in fields(SamplingParams):
        value = escape(_value(f.name, getattr(params, f.name)))
        name = f"<b>{f.name}</b>" if f.name in changed else f.name
        value = f"<b>{value}</b>" if f.name in changed else f"{value} <i>(default)</i>"
        if unticked(f.name, params):
            value += f" <i>({FIELD_STAGE[f.name]} not in the chain)</i>"
        rows.append(f"<tr><td>{name}</td><td>{value}</td></tr>")
    return "<p>The settings this token was sampled with:</p><table>" + "".join(rows) + "</table>"


REMOTE_GREEDY_NOTE = (
    "Greedy (temperature 0): the server drew the most likely token; its numbers are one "
    "stage of its chain, named in the title."
)


SCORED_NOTE = (
    "A scored text's token: given, not drawn. p after the last stage is what the chain the text "
    "was scored with gives it (0 where a stage removed it); its colour, the timeline's p(raw) and "
    "the perplexity use the raw distribution."
)


def title_tooltip(
    params: SamplingParams,
    forced: bool,
    precision: str | None = None,
    chain: tuple[str, ...] = ("temperature",),
    scored: bool = False,
) -> str:
    """What the header's "p after <last stage>" is for this token, and the precision its
    reply was computed in (the reply's own record, not the model loaded now). ``chain``:
    the step's stages (a server's step has one, never temperature)."""
    if scored:
        note = SCORED_NOTE
    elif forced:
        note = FORCED_NOTE
    elif params.greedy:
        note = GREEDY_NOTE if "temperature" in chain else REMOTE_GREEDY_NOTE
    else:
        note = FINAL_NOTE.split(" Greedy")[0]
    return f"{note}\n\nComputed in: {precision_words(precision)} (this reply's precision)."
