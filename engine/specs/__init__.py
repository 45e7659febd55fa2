"""Each sampling stage's spec: its fields, when it acts, its docs. Plain data, no MLX.

A stage ``<name>`` is two files: ``engine/specs/<name>.py`` (its ``StageSpec``; the app, the
parameters and the CLI read it) and ``engine/stages/<name>.py`` (its ``Stage``: the ``[B, V]``
kernel and per-row state, on MLX). Nothing else names it: ``engine.specs.registry`` finds the
specs by module name, ``engine.stages.kernels`` the kernels by the specs' names.
"""

from __future__ import annotations

from engine.specs.registry import SPECS, row_chain

__all__ = ["SPECS", "row_chain"]
