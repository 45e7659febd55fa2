"""Every stage's ``Stage`` (kernel and state), imported by name from its spec: MLX side."""

from __future__ import annotations

import importlib

from engine.specs.registry import SPECS
from engine.stages.base import Stage


def _load(name: str) -> Stage:
    stage = importlib.import_module(f"engine.stages.{name}").STAGE
    if stage.spec is not SPECS[name]:
        raise ImportError(f"engine/stages/{name}.py's STAGE is not built on its spec.")
    return stage


STAGES: dict[str, Stage] = {name: _load(name) for name in SPECS}
