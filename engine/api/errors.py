"""Errors the engine raises for bad input. Each message names what was wrong."""

from __future__ import annotations

from pathlib import Path


class EngineError(ValueError):
    """A request or call the engine rejected; nothing was changed."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded. ``path`` names the file, folder or repo id."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot load model {str(path)!r}: {reason}")
        self.path = str(path)
        self.reason = reason
