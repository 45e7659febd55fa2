"""What the window keeps between sessions (``QSettings``): geometry and dock layout, the
main settings, the compare variants, the colour switch, the theme, the conversation."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QAbstractButton

from app.model.chat import ChatModel
from app.shell.layout import Docks, default_sizes
from engine.api.params import SamplingParams


def restore_settings(
    docks: Docks, settings: QSettings, color_toggle: QAbstractButton, set_theme: Callable[[str], None]
) -> None:
    window = docks.window
    geometry = settings.value("geometry")
    if geometry is not None:
        window.restoreGeometry(geometry)
    else:
        window.resize(1400, 860)
    state = settings.value("window_state")
    if state is not None:
        window.restoreState(state)
    else:
        default_sizes(docks)
    params = settings.value("params")
    if isinstance(params, str):
        with contextlib.suppress(ValueError, TypeError):
            docks.panel.controls.set_params(SamplingParams.from_dict(json.loads(params)))
    color_toggle.setChecked(settings.value("color_tokens", "false") == "true")
    set_theme(str(settings.value("theme", "system")))


def save_settings(docks: Docks, settings: QSettings, color_tokens: bool, model: ChatModel) -> None:
    """``color_tokens``: the colour switch as the person set it (not as scoring left it)."""
    window = docks.window
    settings.setValue("geometry", window.saveGeometry())
    settings.setValue("window_state", window.saveState())
    settings.setValue("params", json.dumps(docks.panel.controls.current.to_dict()))
    settings.setValue("color_tokens", "true" if color_tokens else "false")
    docks.panel.save()
    if model.conversation is not None:
        settings.setValue("conversation", model.conversation.id)
    settings.sync()
