"""Every stage's spec, found by module name: ``engine/specs/<name>.py`` defines ``SPEC``.

Imports neither MLX nor Qt. Adding a stage adds its modules and nothing else: its fields
join :class:`engine.api.params.SamplingParams`, the CLI, the panel and the docs from here.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from engine.specs.spec import Field, StageSpec

NOT_STAGES = frozenset({"checks", "doc_table", "registry", "spec"})
"""The modules of ``engine/specs/`` that are not a stage's spec."""


def _discover() -> dict[str, StageSpec]:
    found: list[StageSpec] = []
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.name not in NOT_STAGES:
            spec = importlib.import_module(f"engine.specs.{module.name}").SPEC
            if spec.name != module.name:
                raise ImportError(f"engine/specs/{module.name}.py declares stage {spec.name!r}.")
            found.append(spec)
    found.sort(key=lambda s: (s.order, s.name))
    return {s.name: s for s in found}


SPECS: dict[str, StageSpec] = _discover()
"""Every stage by name, in the canonical order."""

SAMPLER_STAGES: tuple[str, ...] = tuple(n for n, s in SPECS.items() if s.reorderable)
"""The names ``SamplingParams.samplers`` may hold."""
DEFAULT_SAMPLERS: tuple[str, ...] = tuple(n for n in SAMPLER_STAGES if SPECS[n].default_on)
STAGE_NAMES: tuple[str, ...] = ("raw", *SPECS)
"""Every stage name, in a fixed canonical order (the engine packs per-stage data in it)."""
STAGE_FIELDS: dict[str, tuple[Field, ...]] = {n: s.fields for n, s in SPECS.items()}
FIELDS: dict[str, Field] = {f.name: f for s in SPECS.values() for f in s.fields}
"""Every stage field by name."""
FIELD_STAGE: dict[str, str] = {f.name: s.name for s in SPECS.values() for f in s.fields}


def _check_unique() -> None:
    names = [f.name for s in SPECS.values() for f in s.fields]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ImportError(f"stage fields declared twice: {', '.join(twice)}.")


_check_unique()


def chain_order(samplers: tuple[str, ...]) -> tuple[str, ...]:
    """Every stage a row with this ``samplers`` order may run, in order: the stages that are
    not reorderable (``bias``), the constraints ``samplers`` does not list (``grammar``), then
    ``samplers``."""
    fixed = tuple(n for n, s in SPECS.items() if not s.reorderable)
    unlisted = tuple(n for n, s in SPECS.items() if s.constraint and n not in samplers)
    return (*fixed, *unlisted, *samplers)


def row_chain(params: Any) -> tuple[str, ...]:
    """The stages that run for one row, in order (``raw`` not included): those of
    :func:`chain_order` that are not off."""
    return tuple(name for name in chain_order(params.samplers) if SPECS[name].active(params))
