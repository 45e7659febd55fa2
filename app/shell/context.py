"""What a shell controller may use: the window's parts, not the window.

Controllers (loading models, scoring, the analyses of a reply, the library, the menus'
submenus) get one :class:`ShellContext` instead of ``window: MainWindow``. It names the few
things they share — the chat's model and the model in use, the store, the settings and the
file dialogs' folders, the status bar, the link to the worker, the actions with their
enablement rules, and how to show an error — so that nothing imports ``window.py`` and no
controller reaches into another's attributes. What a controller needs from another (the
panel's settings, a view) it is given by the window when the window builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QWidget

    from app.model.chat import ChatModel
    from app.model.model_in_use import ModelInUse
    from app.shell.actions import Actions
    from app.shell.background import QtBackground
    from app.shell.engine_link import EngineLink
    from app.store.store import Store
    from app.views.file_dialogs import Folders
    from app.views.status import StatusWidgets


@dataclass(frozen=True)
class ShellContext:
    parent: QWidget
    """The parent of the controllers' dialogs and sheets (the main window, as a widget)."""
    model: ChatModel
    in_use: ModelInUse
    """The model in use (``ModelLoader`` updates it); read it, never copy its facts."""
    store: Store
    settings: QSettings
    folders: Folders
    """Where each kind of file dialog opens (where it last did)."""
    status: StatusWidgets
    link: EngineLink
    """The worker (``link.engine.worker``) and the model's jobs sent to it."""
    actions: Actions
    """Every action with its one enablement rule (``app/shell/actions.py``)."""
    background: QtBackground
    show_error: Callable[[str, BaseException | None], None]
    """A window-modal error box; the message (and the exception's traceback) goes to the log."""
