"""The model in use, from the app's side (no Qt): where it was asked to load from, what the
worker reported once it loaded, the status bar's words for it, and the welcome's once it is
ready.

The shell's :class:`app.shell.controllers.model_loading.ModelLoader` updates it; the window and the
rest of the shell read it (``MainWindow.model_info`` and ``model_source`` are its fields), and
:class:`app.model.chat.ChatModel` reads the loaded model's name, vocabulary and server from it.
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


def ready_words(info: Any, question: bool) -> str:
    """The chat's welcome once ``info``'s model is ready: Enter sends "the question below" only
    while the message box holds one (``question``); after a new chat the box is empty."""
    name = f"{info.name} on {info.source}" if not info.capabilities.load_files else info.name
    if question:
        return f"{name} is ready: press Enter to send the question below."
    return f"{name} is ready: type a message below and press Enter to send it."
