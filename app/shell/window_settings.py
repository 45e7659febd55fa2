"""What the window keeps between sessions (``QSettings``): geometry and dock layout, the
main settings, the compare variants, the colour switch, the theme, the conversation."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

from app.shell.layout import default_sizes
from engine.api.params import SamplingParams

if TYPE_CHECKING:
    from app.shell.window import MainWindow


def restore_settings(window: MainWindow) -> None:
    settings = window.settings
    geometry = settings.value("geometry")
    if geometry is not None:
        window.restoreGeometry(geometry)
    else:
        window.resize(1400, 860)
    state = settings.value("window_state")
    if state is not None:
        window.restoreState(state)
    else:
        default_sizes(window)
    params = settings.value("params")
    if isinstance(params, str):
        with contextlib.suppress(ValueError, TypeError):
            window.controls.set_params(SamplingParams.from_dict(json.loads(params)))
    window.color_toggle.setChecked(settings.value("color_tokens", "false") == "true")
    window.set_theme(str(settings.value("theme", "system")))


def save_settings(window: MainWindow) -> None:
    settings = window.settings
    settings.setValue("geometry", window.saveGeometry())
    settings.setValue("window_state", window.saveState())
    settings.setValue("params", json.dumps(window.controls.current.to_dict()))
    settings.setValue("color_tokens", "true" if window.color_toggle.isChecked() else "false")
    window.panel.save()
    if window.model.conversation is not None:
        settings.setValue("conversation", window.model.conversation.id)
    settings.sync()
