"""Sampling presets: the built-in ones, and how a preset (built-in or saved) applies.

A preset holds the stage order (``samplers``) and every stage's parameters, so
applying one sets the whole chain. A preset saved by an older version lacks the
newer fields: they take their defaults, which leave those stages off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams
from engine.specs.registry import FIELDS, SPECS

STAGE_PARAMS = ("samplers", *(name for name, f in FIELDS.items() if not f.custom))
"""The fields every preset sets: the order and every stage's parameters (from the specs),
but the structured output (``grammar``): a built-in preset is a way of sampling, and leaves
the format of the reply as it is (a saved preset that holds one sets it)."""
_DEFAULTS = SamplingParams().to_dict()
STAGE_DEFAULTS: dict[str, Any] = {name: _DEFAULTS[name] for name in STAGE_PARAMS}

CUSTOM = "Custom"
LLAMA_CPP = "llama.cpp order"
BUILTIN_PRESETS: dict[str, dict[str, Any]] = {
    "Greedy": {**STAGE_DEFAULTS},
    "Balanced": {
        **STAGE_DEFAULTS,
        "temperature": 0.7,
        "top_k": 40,
        "top_p": 0.9,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
    },
    "Creative": {
        **STAGE_DEFAULTS,
        "temperature": 1.1,
        "top_p": 0.98,
        "min_p": 0.02,
        "repetition_penalty": 1.05,
        "presence_penalty": 0.3,
        "frequency_penalty": 0.2,
    },
    # The settings the DRY and XTC authors suggest (oobabooga/text-generation-webui PRs
    # #5677 and #6335): DRY 0.8 / 1.75 / 2, XTC 0.5 / 0.1 over a light min-p.
    "DRY + XTC": {
        **STAGE_DEFAULTS,
        "temperature": 1.0,
        "min_p": 0.02,
        "dry_multiplier": 0.8,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.1,
    },
    # llama.cpp's own order and defaults (common/common.h): temperature last, after
    # every truncation; top-k 40, top-p 0.95, min-p 0.05, T 0.8, penalties over 64.
    LLAMA_CPP: {
        **STAGE_DEFAULTS,
        "samplers": list(LLAMA_CPP_SAMPLERS),
        "temperature": 0.8,
        "top_k": 40,
        "top_p": 0.95,
        "min_p": 0.05,
        "penalty_window": 64,
    },
}


def is_reserved(name: str) -> bool:
    """A built-in preset's name (or "Custom"): not a name to save or delete a preset under."""
    return name in BUILTIN_PRESETS or name == CUSTOM


def apply_preset(current: SamplingParams, preset: Mapping[str, Any]) -> SamplingParams:
    """``current`` with the preset's values; stage fields the preset lacks take their defaults."""
    values = {**current.to_dict(), **STAGE_DEFAULTS, **preset}
    return SamplingParams.from_dict(values)


def preset_matches(params: SamplingParams, preset: Mapping[str, Any]) -> bool:
    """Whether applying the preset would change nothing."""
    try:
        return apply_preset(params, preset) == params
    except (TypeError, ValueError):  # a hand-edited or outdated saved preset
        return False


def preset_data(params: SamplingParams) -> dict[str, Any]:
    """What a saved preset keeps: everything but the seed (a preset is a style, not a replay)."""
    data = params.to_dict()
    data.pop("seed", None)
    return data


def short_label(params: SamplingParams) -> str:
    """A few words for settings that match no preset: the stages that run (in ``samplers``
    and not neutral: a stage unticked in the chain editor keeps its values but does
    nothing, so it is not named), each as its spec words it, then the seed."""
    specs = sorted((s for s in SPECS.values() if s.reorderable), key=lambda s: not s.marks_greedy)  # "T" first
    parts = [label for spec in specs if spec.active(params) and (label := spec.short_label(params))]
    if params.seed is not None:
        parts.append(f"seed {params.seed}")
    return ", ".join(parts) or "T 1"
