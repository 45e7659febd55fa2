"""Models → KV cache (Off, 8-bit, 4-bit), beside Models → Precision.

The choice is saved per model source (``app.model.kv_cache``) and sent with every load of
that model (``app.shell.model_loading``, as ``engine.api.kv_quantization.KVQuantization``);
choosing another one reloads the local model through the loader, as a precision change does
(which asks first while a reply is being written). A server keeps its own cache, so the
submenu is disabled while one is in use. A model the engine refuses the setting for (a
sliding-window model) fails to load like any other: its message is shown, the previous
model stays, and the saved choice goes back to what that model runs with
(:meth:`KVCacheMenu.revert_after_failure`).
"""

from __future__ import annotations

from collections.abc import Callable

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
from app.shell.context import ShellContext
from app.shell.precision_menu import current_source, is_server

MENU_TIP = (
    "Store the model's keys and values in fewer bits: less memory, and logprobs move (Compare models… measures it)."
)


def saved_kv(settings: QSettings, source: str | None) -> int:
    """The bits chosen for ``source``'s KV cache (0, off, unless one was chosen)."""
    return CHOICE.saved(settings, source)


def save_kv(settings: QSettings, source: str, bits: int) -> None:
    CHOICE.save(settings, source, bits)


class KVCacheMenu:
    """The KV cache submenu (``menu``, laid out by the menus) and its exclusive group of
    choices; enabled unless a server is in use (the submenu's rule, in ``context.actions``)."""

    def __init__(self, context: ShellContext, load: Callable[[str], None]) -> None:
        self.context, self.load = context, load
        self.menu = QMenu("KV cache", context.parent)
        self.menu.setToolTipsVisible(True)
        self.menu.menuAction().setToolTip(MENU_TIP)
        self.menu.menuAction().setStatusTip(MENU_TIP)
        self.group = QActionGroup(context.parent)
        self.group.setExclusive(True)
        for bits in CHOICES:
            action = QAction(CHOICE_LABELS[bits], context.parent, checkable=True)
            action.setData(bits)
            action.setToolTip(CHOICE_TIPS[bits])
            action.setStatusTip(CHOICE_TIPS[bits])
            action.triggered.connect(lambda _=False, b=bits: self.choose(b))
            self.group.addAction(action)
            self.menu.addAction(action)
        context.actions.bind(self.menu, needs=lambda: SERVER_KEEPS if is_server(context.in_use) else "", prefix="")
        # The mark follows the model the menu is opened for (the one loading, before it loads).
        self.menu.aboutToShow.connect(self.sync)

    def sync(self) -> None:
        """Check the current model's choice."""
        chosen = saved_kv(self.context.settings, current_source(self.context.in_use))
        for action in self.group.actions():
            action.setChecked(action.data() == chosen)

    def choose(self, bits: int) -> None:
        """Save ``bits`` for the current model and reload it with that KV cache."""
        in_use = self.context.in_use
        source = current_source(in_use)
        if source is None or is_server(in_use):
            self.sync()
            return
        save_kv(self.context.settings, source, bits)
        self.sync()
        info = in_use.info
        if info is not None and bits_of(info.kv) != bits:  # a load in flight reads the choice itself
            self.context.status.show_message(f"Reloading with the KV cache {CHOICE_LABELS[bits]}…")
            self.load(source)

    def revert_after_failure(self, source: str) -> None:
        """A load of ``source`` failed: if the model still in use is ``source`` (a refused KV
        setting on a reload), its saved choice goes back to what it runs with, so the menu and
        the next start say what is true."""
        info = self.context.in_use.info
        if info is None or info.source != source or not info.capabilities.load_files:
            return
        settings = self.context.settings
        if saved_kv(settings, source) != bits_of(info.kv):
            save_kv(settings, source, bits_of(info.kv))
        self.sync()
