"""Models → KV cache (Off, 8-bit, 4-bit), beside Models → Precision.

The choice is saved per model source (``app.model.kv_cache``) and sent with every load of
that model (``app.shell.model_loading``, as ``engine.api.kv_quantization.KVQuantization``);
choosing another one reloads the local model through the loader, as a precision change does
(which asks first while a reply is being written). A server keeps its own cache, so the
submenu is disabled while one is in use. A model the engine refuses the setting for (a
sliding-window model) fails to load like any other: its message is shown, the previous
model stays, and the saved choice goes back to what that model runs with
(:func:`revert_after_failure`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

from app.model.kv_cache import (
    CHOICE,
    CHOICE_LABELS,
    CHOICE_TIPS,
    CHOICES,
    SERVER_KEEPS,
    bits_of,
)
from app.shell.precision_menu import current_source, is_server

if TYPE_CHECKING:
    from app.shell.window import MainWindow

MENU_TIP = (
    "Store the model's keys and values in fewer bits: less memory, and logprobs move (Compare models… measures it)."
)


def saved_kv(settings: QSettings, source: str | None) -> int:
    """The bits chosen for ``source``'s KV cache (0, off, unless one was chosen)."""
    return CHOICE.saved(settings, source)


def save_kv(settings: QSettings, source: str, bits: int) -> None:
    CHOICE.save(settings, source, bits)


@dataclass
class KVCacheMenu:
    """The KV cache submenu and its exclusive group of choices (``window.menus.kv_cache``)."""

    menu: QMenu
    group: QActionGroup


def add_kv_cache_menu(window: MainWindow, menu: QMenu, before: QAction | None = None) -> KVCacheMenu:
    """The KV cache submenu, in ``menu`` before ``before`` (at its end without one)."""
    sub = QMenu("KV cache", menu)
    if before is not None:
        menu.insertMenu(before, sub)
    else:
        menu.addMenu(sub)
    sub.setToolTipsVisible(True)
    sub.menuAction().setStatusTip(MENU_TIP)
    group = QActionGroup(window)
    group.setExclusive(True)
    for bits in CHOICES:
        action = QAction(CHOICE_LABELS[bits], window, checkable=True)
        action.setData(bits)
        action.setToolTip(CHOICE_TIPS[bits])
        action.setStatusTip(CHOICE_TIPS[bits])
        action.triggered.connect(lambda _=False, b=bits: set_kv_cache(window, b))
        group.addAction(action)
        sub.addAction(action)
    menu.aboutToShow.connect(lambda: update_kv_cache_menu(window))
    return KVCacheMenu(sub, group)


def update_kv_cache_menu(window: MainWindow) -> None:
    """Check the current model's choice; disable the submenu, with the reason, for a server."""
    items = getattr(window.menus, "kv_cache", None)
    if items is None:
        return
    server = is_server(window)
    items.menu.setEnabled(not server)
    items.menu.menuAction().setToolTip(SERVER_KEEPS if server else MENU_TIP)
    items.menu.menuAction().setStatusTip(SERVER_KEEPS if server else MENU_TIP)
    chosen = saved_kv(window.settings, current_source(window))
    for action in items.group.actions():
        action.setChecked(action.data() == chosen)


def set_kv_cache(window: MainWindow, bits: int) -> None:
    """Save ``bits`` for the current model and reload it with that KV cache."""
    source = current_source(window)
    if source is None or is_server(window):
        update_kv_cache_menu(window)
        return
    save_kv(window.settings, source, bits)
    update_kv_cache_menu(window)
    info = window.model_info
    if info is not None and bits_of(info.kv) != bits:  # a load in flight reads the choice itself
        window.status.show_message(f"Reloading with the KV cache {CHOICE_LABELS[bits]}…")
        window.load_model(source)


def revert_after_failure(window: MainWindow, source: str) -> None:
    """A load of ``source`` failed: if the model still in use is ``source`` (a refused KV
    setting on a reload), its saved choice goes back to what it runs with, so the menu and
    the next start say what is true."""
    info = window.model_info
    if info is None or info.source != source or not info.capabilities.load_files:
        return
    if saved_kv(window.settings, source) != bits_of(info.kv):
        save_kv(window.settings, source, bits_of(info.kv))
    update_kv_cache_menu(window)
