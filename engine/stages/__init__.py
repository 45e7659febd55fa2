"""The sampling stages, one spec module and one kernel module each, found by name.

A stage ``<name>`` is ``engine/stages/<name>_spec.py`` (its ``StageSpec``: fields,
when it acts, docs; no MLX) and ``engine/stages/<name>.py`` (its ``Stage``: the
``[B, V]`` kernel and per-row state). Nothing else names it. Importing this package
loads no MLX: ``STAGES`` and ``Stage`` are loaded on first use, so the app can read
the specs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.stages.registry import SPECS

if TYPE_CHECKING:
    from engine.stages.base import Stage


def row_chain(params: Any) -> tuple[str, ...]:
    """The stages that run for one row, in order (``raw`` not included): the stages that
    are not reorderable (``bias``) first when set, then the ``samplers`` order, leaving
    out stages that are off."""
    fixed = tuple(n for n, s in SPECS.items() if not s.reorderable)
    return tuple(name for name in (*fixed, *params.samplers) if SPECS[name].active(params))


def __getattr__(name: str) -> Any:
    # PEP 562: the MLX side only when asked for.
    if name == "STAGES":
        from engine.stages.kernels import STAGES

        return STAGES
    if name == "Stage":
        from engine.stages.base import Stage

        return Stage
    raise AttributeError(name)


__all__ = ["SPECS", "STAGES", "Stage", "row_chain"]
