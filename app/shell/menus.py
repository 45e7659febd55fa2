"""The window's menus: File, Chat, Models, View, Help."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QInputDialog, QMenu, QMessageBox

from app.model.conversation_labels import conversation_label, conversation_tooltip
from app.shell.kv_cache_menu import KVCacheMenu, add_kv_cache_menu
from app.shell.layout import reset_layout
from app.shell.library import LibraryController, add_library_action
from app.shell.logging_setup import show_log
from app.shell.precision_menu import PrecisionMenu, add_precision_menu
from app.shell.recovery import continue_interrupted
from app.shell.score_dialog import add_chat_actions, add_file_actions
from app.views.file_dialogs import MODELS

if TYPE_CHECKING:
    from app.shell.window import MainWindow


def _action(window: MainWindow, menu: QMenu, text: str, slot, shortcut=None) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(shortcut)
    action.triggered.connect(lambda _=False: slot())
    menu.addAction(action)
    return action


class Menus:
    """What the menus keep after they are built: the submenus filled when shown, the theme
    group, the precision and KV cache items, Compare models…, Logit lens of every token, the
    model library and the dialogs they opened last. The window holds it as ``window.menus``."""

    def __init__(self) -> None:
        self.conversations_menu: QMenu | None = None
        self.recent_menu: QMenu | None = None
        self.theme_group: QActionGroup | None = None
        self.precision: PrecisionMenu | None = None
        self.kv_cache: KVCacheMenu | None = None
        self.compare_action: QAction | None = None
        self.lens_action: QAction | None = None
        self.library: LibraryController | None = None
        self.export_actions: dict[str, QAction] = {}
        self.delete_box: QMessageBox | None = None
        self.log_dialog = None


def build_menus(window: MainWindow) -> Menus:
    menus = Menus()
    bar = window.menuBar()
    file_menu = bar.addMenu("&File")
    file_menu.setToolTipsVisible(True)
    _action(window, file_menu, "New chat", window.new_chat, QKeySequence.StandardKey.New)
    menus.conversations_menu = file_menu.addMenu("Open conversation")
    menus.conversations_menu.aboutToShow.connect(lambda: fill_conversations(window, menus.conversations_menu))
    delete = _action(window, file_menu, "Delete this conversation…", lambda: confirm_delete(window, menus))
    file_menu.aboutToShow.connect(lambda: delete.setEnabled(window.model.conversation is not None))
    # Score text, Open export, Export (app/shell/score_dialog.py)
    menus.export_actions = add_file_actions(window, file_menu)
    file_menu.addSeparator()
    _action(window, file_menu, "Quit", window.close, QKeySequence.StandardKey.Quit)

    chat_menu = bar.addMenu("&Chat")
    chat_menu.setToolTipsVisible(True)
    _action(window, chat_menu, "Send", window.send)
    _action(window, chat_menu, "Stop", window.stop, QKeySequence(Qt.Key.Key_Escape))
    _action(window, chat_menu, "Regenerate", window.regenerate, QKeySequence("Ctrl+R"))
    _action(window, chat_menu, "Continue the interrupted reply", lambda: continue_interrupted(window))
    compare = QAction("Compare settings side by side", window, checkable=True)
    compare.setShortcut(QKeySequence("Ctrl+K"))
    compare.toggled.connect(window.panel.compare.setChecked)
    window.panel.compare.toggled.connect(compare.setChecked)
    compare.setChecked(window.panel.compare_on())
    chat_menu.addAction(compare)
    window.capability_gate.bind(compare, "fork")
    window.capability_gate.bind(window.panel.compare, "fork")
    add_chat_actions(window, chat_menu)  # Replay under the current settings, branch at its first change

    model_menu = bar.addMenu("&Models")
    menus.library = add_library_action(window, model_menu)  # Library… (app/shell/library.py)
    model_menu.addSeparator()
    _action(window, model_menu, "Default model (SmolLM2-135M-Instruct)", lambda: window.load_model("default"))
    _action(window, model_menu, "Open model folder…", lambda: open_folder(window))
    _action(window, model_menu, "Open GGUF file…", lambda: open_gguf(window))
    _action(window, model_menu, "Hugging Face repo id…", lambda: open_repo(window))
    model_menu.addSeparator()
    _action(window, model_menu, "Connect to a server…", window.open_connect_dialog)
    menus.recent_menu = model_menu.addMenu("Recent models")
    menus.recent_menu.aboutToShow.connect(lambda: fill_recent(window, menus.recent_menu))
    model_menu.addSeparator()
    # Precision ▸, Check precision… (app/shell/precision_menu.py)
    menus.precision = add_precision_menu(window, model_menu)
    # KV cache ▸ beside it (app/shell/kv_cache_menu.py)
    menus.kv_cache = add_kv_cache_menu(window, model_menu, before=menus.precision.check_action)
    menus.compare_action = window.compare_models.action  # app/shell/compare_models.py
    model_menu.addAction(menus.compare_action)
    menus.lens_action = window.logit_lens.action  # app/shell/logit_lens.py
    model_menu.addAction(menus.lens_action)
    for analysis in window.step_analyses:  # app/shell/step_analyses.py
        model_menu.addAction(analysis.action)

    view_menu = bar.addMenu("&View")
    theme_menu = view_menu.addMenu("Theme")
    menus.theme_group = QActionGroup(window)
    for name in ("system", "light", "dark"):
        action = QAction(name.capitalize(), window, checkable=True)
        action.triggered.connect(lambda _=False, n=name: window.set_theme(n))
        menus.theme_group.addAction(action)
        theme_menu.addAction(action)
    color = QAction("Colour tokens by probability", window, checkable=True)
    color.toggled.connect(window.color_toggle.setChecked)
    window.color_toggle.toggled.connect(color.setChecked)
    view_menu.addAction(color)
    for dock in (window.inspector_dock, window.timeline_dock, window.controls_dock):
        view_menu.addAction(dock.toggleViewAction())
    _action(window, view_menu, "Reset layout", lambda: reset_layout(window))

    help_menu = bar.addMenu("&Help")
    _action(window, help_menu, "About Logitscope", window.show_about)
    _action(window, help_menu, "Show log", lambda: setattr(menus, "log_dialog", show_log(window)))
    return menus


def fill_conversations(window: MainWindow, menu: QMenu) -> None:
    menu.clear()
    conversations = window.store.reads.conversation_list(30)
    if not conversations:  # an empty submenu looks broken: say why it is empty
        menu.addAction("No conversations").setEnabled(False)
    menu.setToolTipsVisible(True)
    for conversation in conversations:
        # Titles repeat (the first question): when, which model and how long tell them apart.
        action = menu.addAction(conversation_label(conversation))
        action.setToolTip(conversation_tooltip(conversation))
        action.triggered.connect(lambda _=False, c=conversation.id: window.open_conversation(c))


def confirm_delete(window: MainWindow, menus: Menus) -> None:
    """File → Delete this conversation…: asks first (a sheet on macOS, as Finder and Mail do
    for what cannot be undone); Delete is destructive, Cancel the default."""
    conversation = window.model.conversation
    if conversation is None:
        window.status.show_message("No conversation is open: there is nothing to delete.")
        return
    box = QMessageBox(
        QMessageBox.Icon.Warning, "Logitscope", f"Delete the conversation “{conversation.title}”?", parent=window
    )
    box.setInformativeText("Its messages, every branch and compare run are removed. This cannot be undone.")
    delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
    box.setDefaultButton(box.addButton(QMessageBox.StandardButton.Cancel))
    box.setWindowModality(Qt.WindowModality.WindowModal)

    def answered(button) -> None:
        current = window.model.conversation
        if button is delete and current is not None and current.id == conversation.id:
            window.model.delete_conversation()
            window.status.show_message(f"Deleted “{conversation.title}”.")
            window.composer.setFocus()

    box.buttonClicked.connect(answered)
    menus.delete_box = box
    box.open()


def recent_models(window: MainWindow) -> list[str]:
    try:
        return list(json.loads(window.settings.value("recent_models", "[]")))
    except (TypeError, ValueError):
        return []


def fill_recent(window: MainWindow, menu: QMenu) -> None:
    menu.clear()
    for source in recent_models(window):
        action = menu.addAction(source)
        action.triggered.connect(lambda _=False, s=source: window.load_model(s))


def open_folder(window: MainWindow) -> None:
    folder = window.folders.open_folder(window, MODELS, "Open mlx-lm model folder")
    if folder:
        window.load_model(folder)


def open_gguf(window: MainWindow) -> None:
    path = window.folders.open_file(window, MODELS, "Open GGUF file", "GGUF models (*.gguf)")
    if path:
        window.load_model(path)


def open_repo(window: MainWindow) -> None:
    repo, ok = QInputDialog.getText(window, "Hugging Face model", "Repo id (e.g. mlx-community/SmolLM2-360M-Instruct):")
    if ok and repo.strip():
        window.load_model(repo.strip())
