"""Models → Precision (auto, float32, float16, bfloat16) and Models → Check precision….

The choice is saved per model source (``app.model.precision``) and sent with every load of
that model (``app.shell.model_loading``); choosing another one reloads the local model through
the loader, which asks first while a reply is being written. A server computes in what it
was started with, so the submenu is disabled while one is in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

from app.model.precision import (
    CHOICE,
    CHOICE_LABELS,
    CHOICE_TIPS,
    SERVER_CHOOSES,
)
from engine.api.precision import PRECISIONS

if TYPE_CHECKING:
    from app.shell.window import MainWindow

MENU_TIP = "What the model computes in. Auto is float32 where it fits in memory: the numbers shown are the model's."


def saved_choice(settings: QSettings, source: str | None) -> str:
    """The precision chosen for ``source`` (``auto`` unless one was chosen)."""
    return CHOICE.saved(settings, source)


def save_choice(settings: QSettings, source: str, choice: str) -> None:
    CHOICE.save(settings, source, choice)


@dataclass
class PrecisionMenu:
    """The Precision submenu, its exclusive group of choices and the Check precision… action
    (``window.menus.precision``)."""

    menu: QMenu
    group: QActionGroup
    check_action: QAction


def add_precision_menu(window: MainWindow, menu: QMenu) -> PrecisionMenu:
    """The Precision submenu and the Check precision… action, at the end of ``menu``."""
    sub = menu.addMenu("Precision")
    sub.setToolTipsVisible(True)
    sub.menuAction().setStatusTip(MENU_TIP)
    group = QActionGroup(window)
    group.setExclusive(True)
    for choice in PRECISIONS:
        action = QAction(CHOICE_LABELS[choice], window, checkable=True)
        action.setData(choice)
        action.setToolTip(CHOICE_TIPS[choice])
        action.setStatusTip(CHOICE_TIPS[choice])
        action.triggered.connect(lambda _=False, c=choice: set_precision(window, c))
        group.addAction(action)
        sub.addAction(action)
    check = window.precision_check.action  # app/shell/precision_check.py: its own rule
    menu.addAction(check)
    menu.aboutToShow.connect(lambda: update_precision_menu(window))
    return PrecisionMenu(sub, group, check)


def current_source(window: MainWindow) -> str | None:
    """The model the choice applies to: the one loaded, else the one loading."""
    info = window.model_info
    return info.source if info is not None else window.model_source


def is_server(window: MainWindow) -> bool:
    """The loaded backend does not compute here, so the choice means nothing to it."""
    info = window.model_info
    return info is not None and not info.capabilities.precision


def update_precision_menu(window: MainWindow) -> None:
    """Check the current model's choice; disable the submenu for a server (Check precision…
    has its own rule: ``app.shell.precision_check``)."""
    items = window.menus.precision
    server = is_server(window)
    items.menu.setEnabled(not server)
    items.menu.menuAction().setToolTip(SERVER_CHOOSES if server else MENU_TIP)
    items.menu.menuAction().setStatusTip(SERVER_CHOOSES if server else MENU_TIP)
    chosen = saved_choice(window.settings, current_source(window))
    for action in items.group.actions():
        action.setChecked(action.data() == chosen)


def set_precision(window: MainWindow, choice: str) -> None:
    """Save ``choice`` for the current model and reload it in that precision."""
    source = current_source(window)
    if source is None or is_server(window):
        update_precision_menu(window)
        return
    save_choice(window.settings, source, choice)
    update_precision_menu(window)
    info = window.model_info
    if info is not None and info.precision_choice != choice:  # a load in flight reads the choice itself
        window.status.show_message(f"Reloading in {CHOICE_LABELS[choice]}…")
        window.load_model(source)
