"""The sampling stages' kernels, one module per stage (``engine/stages/<name>.py``: its
``Stage``, the ``[B, V]`` kernel and per-row state, built on its spec in ``engine/specs/``),
and the state some of them keep across steps (``rng``, ``dry_state``, ``penalty_counts``).
"""

from __future__ import annotations

from engine.stages.base import Stage
from engine.stages.kernels import STAGES

__all__ = ["STAGES", "Stage"]
