"""A Models submenu whose choice is remembered per model source and sent with every load of
that model (Models → Precision, Models → KV cache): an exclusive group of choices, checked
for the model the menu is opened for, disabled while a server is in use (a server computes
and caches as it was started). Choosing another value saves it and reloads the local model
through the loader (which asks first while a reply is being written)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

from app.model.model_in_use import ModelInUse
from app.model.per_model import PerModelChoice
from app.shell.context import ShellContext
from engine.api.backend import ModelInfo


def current_source(in_use: ModelInUse) -> str | None:
    """The model the choice applies to: the one loaded, else the one loading."""
    info = in_use.info
    return info.source if info is not None else in_use.source


def is_server(in_use: ModelInUse) -> bool:
    """The loaded backend does not compute here, so the choice means nothing to it."""
    info = in_use.info
    return info is not None and not info.capabilities.precision


class PerModelMenu:
    """The submenu (``menu``, laid out by the menus) and its exclusive ``group``.

    A subclass names its choice (``CHOICE``: the values in menu order, their labels and
    tips), why a server disables it, and what the loaded model runs with (:meth:`running`)."""

    TITLE: str
    MENU_TIP: str
    CHOICE: PerModelChoice
    SERVER_REASON: str
    RELOADING: str
    """The status bar's words while reloading, with ``{label}``."""

    def __init__(self, context: ShellContext, load: Callable[[str], None]) -> None:
        self.context, self.load = context, load
        self.menu = QMenu(self.TITLE, context.parent)
        self.menu.setToolTipsVisible(True)
        self.menu.menuAction().setToolTip(self.MENU_TIP)
        self.menu.menuAction().setStatusTip(self.MENU_TIP)
        self.group = QActionGroup(context.parent)
        self.group.setExclusive(True)
        choice = self.CHOICE
        for value in choice.values:
            action = QAction(choice.labels[value], context.parent, checkable=True)
            action.setData(value)
            action.setToolTip(choice.tips[value])
            action.setStatusTip(choice.tips[value])
            action.triggered.connect(lambda _=False, v=value: self.choose(v))
            self.group.addAction(action)
            self.menu.addAction(action)
        reason = self.SERVER_REASON
        context.actions.bind(self.menu, needs=lambda: reason if is_server(context.in_use) else "", prefix="")
        # The mark follows the model the menu is opened for (the one loading, before it loads).
        self.menu.aboutToShow.connect(self.sync)

    def running(self, info: ModelInfo) -> Any:
        """The value the loaded model runs with."""
        raise NotImplementedError

    def sync(self) -> None:
        """Check the current model's choice."""
        chosen = self.CHOICE.saved(self.context.settings, current_source(self.context.in_use))
        for action in self.group.actions():
            action.setChecked(action.data() == chosen)

    def choose(self, value: Any) -> None:
        """Save ``value`` for the current model and reload it with that choice."""
        in_use = self.context.in_use
        source = current_source(in_use)
        if source is None or is_server(in_use):
            self.sync()
            return
        self.CHOICE.save(self.context.settings, source, value)
        self.sync()
        info = in_use.info
        if info is not None and self.running(info) != value:  # a load in flight reads the choice itself
            self.context.status.show_message(self.RELOADING.format(label=self.CHOICE.labels[value]))
            self.load(source)
