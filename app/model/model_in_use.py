"""The model in use, from the app's side (no Qt): where it was asked to load from, what the
worker reported once it loaded, and the status bar's words for it.

The shell's :class:`app.shell.model_loading.ModelLoader` updates it; the window and the
rest of the shell read it (``MainWindow.model_info`` and ``model_source`` are its fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ModelInUse:
    source: str | None = None
    """The model asked for last (a path, ``default``, a repo id, a server's address)."""
    info: Any = None
    """The worker's ``ModelInfo`` of the model loaded; None until one has loaded."""
    label: str = "No model"
    """The status bar's words for the model in use (kept when a later load fails)."""
