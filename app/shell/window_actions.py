"""The window's own actions: the chat's commands (new chat, send, stop, regenerate, continue
the interrupted reply, compare settings), opening and deleting conversations, the theme, the
colour switch, the docks' layout, About and the log. Their slots are the window's
(:class:`Commands`); the menus lay them out (``app/shell/menus.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QAbstractButton, QDockWidget, QMenu, QMessageBox, QPlainTextEdit

from app.model.conversation_labels import conversation_label, conversation_tooltip
from app.shell.context import ShellContext
from app.shell.startup.logging_setup import show_log
from app.shell.startup.recovery import continue_interrupted, interrupted_message
from app.views.help_window import HelpWindow
from app.views.sampling_panel import SamplingPanel

THEMES = ("system", "light", "dark")
NOTHING_TO_DELETE = "No conversation is open: there is nothing to delete."
LOADING = "The model is still loading."
WRITING = "A reply is being written: stop it first (Esc)."
NOTHING_TYPED = "Type a message first."
NOTHING_RUNNING = "Nothing is running: no reply is being written and no analysis runs."
NOTHING_TO_REGENERATE = "No reply in this chat to regenerate."
NOTHING_INTERRUPTED = "No interrupted reply in this conversation."


class Commands(Protocol):
    """What the window does for its actions."""

    def new_chat(self) -> None: ...
    def send(self) -> None: ...
    def stop(self) -> None: ...
    def working(self) -> bool: ...
    def regenerate(self) -> None: ...
    def close(self) -> bool: ...
    def set_theme(self, name: str) -> None: ...
    def show_about(self) -> None: ...
    def open_conversation(self, conversation_id: int) -> None: ...
    def reset_layout(self) -> None: ...
    def focus_composer(self) -> None: ...


@dataclass
class Toggles:
    """The window's controls that a checkable action mirrors, and its docks."""

    panel: SamplingPanel
    composer: QPlainTextEdit
    color_toggle: QAbstractButton
    docks: tuple[QDockWidget, ...]


class WindowActions:
    def __init__(self, context: ShellContext, commands: Commands, toggles: Toggles) -> None:
        self.context, self.commands = context, commands
        add, model = context.actions.add, context.model
        self.new_chat = add("New chat", commands.new_chat, shortcut=QKeySequence.StandardKey.New)
        self.conversations_menu = QMenu("Open conversation", context.parent)
        self.conversations_menu.aboutToShow.connect(self.fill_conversations)
        self.delete = add(
            "Delete this conversation…",
            self.confirm_delete,
            needs=lambda: "" if model.conversation is not None else NOTHING_TO_DELETE,
            says="nothing",
        )
        self.delete_box: QMessageBox | None = None
        self.quit = add("Quit", commands.close, shortcut=QKeySequence.StandardKey.Quit)

        # Each chat command says why it cannot run now (they were all enabled in an empty chat).
        composer = toggles.composer
        composer.textChanged.connect(context.actions.refresh_after)  # Send follows the typed text
        self.send = add(
            "Send",
            commands.send,
            needs=lambda: self._idle() or (NOTHING_TYPED if not composer.toPlainText().strip() else ""),
        )
        self.stop = add(
            "Stop",
            commands.stop,
            shortcut=QKeySequence(Qt.Key.Key_Escape),
            needs=lambda: "" if commands.working() else NOTHING_RUNNING,
        )
        self.regenerate = add(
            "Regenerate",
            commands.regenerate,
            shortcut="Ctrl+R",
            needs=lambda: self._idle() or ("" if model.last_assistant() is not None else NOTHING_TO_REGENERATE),
        )
        self.continue_interrupted = add(
            "Continue the interrupted reply",
            lambda: continue_interrupted(context),
            needs=lambda: self._idle() or ("" if interrupted_message(model) is not None else NOTHING_INTERRUPTED),
        )
        panel = toggles.panel
        self.compare_settings = add(
            "Compare settings side by side",
            panel.compare.setChecked,
            capability="fork",
            shortcut="Ctrl+K",
            checkable=True,
        )
        self.compare_settings.setChecked(panel.compare_on())
        panel.compare.toggled.connect(self.compare_settings.setChecked)
        context.actions.bind(panel.compare, "fork")  # the panel's switch does the same

        self.theme_group = QActionGroup(context.parent)
        for name in THEMES:
            action = QAction(name.capitalize(), context.parent, checkable=True)
            action.triggered.connect(lambda _=False, n=name: commands.set_theme(n))
            self.theme_group.addAction(action)
        self.colour = add("Colour tokens by probability", toggles.color_toggle.setChecked, checkable=True)
        toggles.color_toggle.toggled.connect(self.colour.setChecked)
        self.docks = [dock.toggleViewAction() for dock in toggles.docks]
        self.reset_layout = add("Reset layout", commands.reset_layout)

        self.help = add("Logitscope Help", self.open_help, shortcut=QKeySequence.StandardKey.HelpContents)
        self.help_window: HelpWindow | None = None
        self.about = add("About Logitscope", commands.show_about)
        self.log_dialog = None
        self.show_log = add("Show log", self.open_log)

    def _idle(self) -> str:
        """Why no new reply can start now ("" when one can): a model loading, a reply being written."""
        if self.context.in_use.info is None:
            return LOADING
        return WRITING if self.context.model.busy() else ""

    def check_theme(self, name: str) -> None:
        for action in self.theme_group.actions():
            action.setChecked(action.text().lower() == name)

    def open_help(self) -> None:
        """Help → Logitscope Help (F1): the README and docs that ship with the app, offline."""
        if self.help_window is None:
            self.help_window = HelpWindow()
        self.help_window.show()
        self.help_window.raise_()
        self.help_window.activateWindow()

    def open_log(self) -> None:
        self.log_dialog = show_log(self.context.parent)

    def fill_conversations(self) -> None:
        menu = self.conversations_menu
        menu.clear()
        conversations = self.context.store.reads.conversation_list(30)
        if not conversations:  # an empty submenu looks broken: say why it is empty
            menu.addAction("No conversations").setEnabled(False)
        menu.setToolTipsVisible(True)
        for conversation in conversations:
            # Titles repeat (the first question): when, which model and how long tell them apart.
            action = menu.addAction(conversation_label(conversation))
            action.setToolTip(conversation_tooltip(conversation))
            action.triggered.connect(lambda _=False, c=conversation.id: self.commands.open_conversation(c))

    def confirm_delete(self) -> None:
        """File → Delete this conversation…: asks first (a sheet on macOS, as Finder and Mail do
        for what cannot be undone); Delete is destructive, Cancel the default."""
        model, status = self.context.model, self.context.status
        conversation = model.conversation
        if conversation is None:
            status.show_message(NOTHING_TO_DELETE)
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Logitscope",
            f"Delete the conversation “{conversation.title}”?",
            parent=self.context.parent,
        )
        box.setInformativeText("Its messages, every branch and compare run are removed. This cannot be undone.")
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(box.addButton(QMessageBox.StandardButton.Cancel))
        box.setWindowModality(Qt.WindowModality.WindowModal)

        def answered(button) -> None:
            current = model.conversation
            if button is delete and current is not None and current.id == conversation.id:
                model.delete_conversation()
                status.show_message(f"Deleted “{conversation.title}”.")
                self.commands.focus_composer()

        box.buttonClicked.connect(answered)
        self.delete_box = box
        box.open()
