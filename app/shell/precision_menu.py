"""Models → Precision (auto, float32, float16, bfloat16).

The choice is saved per model source (``app.model.precision``) and sent with every load of
that model (``app.shell.model_loading``); choosing another one reloads the local model through
the loader, which asks first while a reply is being written. A server computes in what it
was started with, so the submenu is disabled while one is in use.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSettings
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

from app.model.model_in_use import ModelInUse
from app.model.precision import (
    CHOICE,
    CHOICE_LABELS,
    CHOICE_TIPS,
    SERVER_CHOOSES,
)
from app.shell.context import ShellContext
from engine.api.precision import PRECISIONS

MENU_TIP = "What the model computes in. Auto is float32 where it fits in memory: the numbers shown are the model's."


def saved_choice(settings: QSettings, source: str | None) -> str:
    """The precision chosen for ``source`` (``auto`` unless one was chosen)."""
    return CHOICE.saved(settings, source)


def save_choice(settings: QSettings, source: str, choice: str) -> None:
    CHOICE.save(settings, source, choice)


def current_source(in_use: ModelInUse) -> str | None:
    """The model the choice applies to: the one loaded, else the one loading."""
    info = in_use.info
    return info.source if info is not None else in_use.source


def is_server(in_use: ModelInUse) -> bool:
    """The loaded backend does not compute here, so the choice means nothing to it."""
    info = in_use.info
    return info is not None and not info.capabilities.precision


class PrecisionMenu:
    """The Precision submenu (``menu``, laid out by the menus) and its exclusive group of
    choices; enabled unless a server is in use (the submenu's rule, in ``context.actions``)."""

    def __init__(self, context: ShellContext, load: Callable[[str], None]) -> None:
        self.context, self.load = context, load
        self.menu = QMenu("Precision", context.parent)
        self.menu.setToolTipsVisible(True)
        self.menu.menuAction().setToolTip(MENU_TIP)
        self.menu.menuAction().setStatusTip(MENU_TIP)
        self.group = QActionGroup(context.parent)
        self.group.setExclusive(True)
        for choice in PRECISIONS:
            action = QAction(CHOICE_LABELS[choice], context.parent, checkable=True)
            action.setData(choice)
            action.setToolTip(CHOICE_TIPS[choice])
            action.setStatusTip(CHOICE_TIPS[choice])
            action.triggered.connect(lambda _=False, c=choice: self.choose(c))
            self.group.addAction(action)
            self.menu.addAction(action)
        context.actions.bind(self.menu, needs=lambda: SERVER_CHOOSES if is_server(context.in_use) else "", prefix="")
        # The mark follows the model the menu is opened for (the one loading, before it loads).
        self.menu.aboutToShow.connect(self.sync)

    def sync(self) -> None:
        """Check the current model's choice."""
        chosen = saved_choice(self.context.settings, current_source(self.context.in_use))
        for action in self.group.actions():
            action.setChecked(action.data() == chosen)

    def choose(self, choice: str) -> None:
        """Save ``choice`` for the current model and reload it in that precision."""
        in_use = self.context.in_use
        source = current_source(in_use)
        if source is None or is_server(in_use):
            self.sync()
            return
        save_choice(self.context.settings, source, choice)
        self.sync()
        info = in_use.info
        if info is not None and info.precision_choice != choice:  # a load in flight reads the choice itself
            self.context.status.show_message(f"Reloading in {CHOICE_LABELS[choice]}…")
            self.load(source)
