"""The centre of the window: the system prompt, the chat, the colour legend, the composer
and its buttons. Widgets only; the window wires them to the model."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.views.chat_view import ChatView, color_legend, legend_tooltip
from app.views.theme import LIGHT, Colors

MIN_WIDTH = 360  # the chat stays readable: the docks give way before it goes below this
MIN_HEIGHT = 260


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line; Tab and Shift+Tab (Ctrl+Tab too) move the
    focus on: a tab character is rare in a chat message, and a box that keeps Tab blocks
    keyboard-only use of the window."""

    submitted = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setTabChangesFocus(True)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Tab, Qt.Key.Key_Backtab):
            # Plain Tab never gets here (tabChangesFocus); Ctrl+Tab would, and would be typed.
            back = event.key() == Qt.Key.Key_Backtab or bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
            self.focusNextPrevChild(not back)
            return
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class ChatPanel(QWidget):
    def __init__(self, system_prompt: str) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.system_prompt = QLineEdit(system_prompt)
        self.system_prompt.setPlaceholderText("System prompt (empty: none)")
        self.chat = ChatView()
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.color_toggle = QCheckBox("Colour tokens by probability")
        self.color_toggle.toggled.connect(self._on_color_toggled)
        self.chat.kinds_changed.connect(lambda *_: self._on_color_toggled(self.color_toggle.isChecked()))
        self.composer = Composer()
        self.composer.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self.composer.setFixedHeight(80)
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.regen_button = QPushButton("Regenerate")
        for button in (self.send_button, self.stop_button, self.regen_button):
            # A click leaves the focus in the composer (as on macOS): Enter still sends.
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.setMinimumSize(MIN_WIDTH, MIN_HEIGHT)

        top = QHBoxLayout()
        top.addWidget(QLabel("System"))
        top.addWidget(self.system_prompt, 1)
        legend_row = QHBoxLayout()
        legend_row.addWidget(self.color_toggle)
        legend_row.addWidget(self.legend, 1)
        buttons = QVBoxLayout()
        for button in (self.send_button, self.stop_button, self.regen_button):
            buttons.addWidget(button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.composer, 1)
        bottom.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.chat, 1)
        layout.addLayout(legend_row)
        layout.addLayout(bottom)

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self.chat.set_colors(colors)
        self._on_color_toggled(self.color_toggle.isChecked())

    def set_busy(self, busy: bool, can_regenerate: bool) -> None:
        self.stop_button.setEnabled(busy)
        self.regen_button.setEnabled(not busy and can_regenerate)

    def reclaim_focus(self) -> None:
        """After a reply: the composer takes the focus back, unless the user is typing in
        another field of the window (a sampling value, the system prompt) or in a dialog."""
        current = QApplication.focusWidget()
        if current is not None and current is not self.composer:
            if current.window() is not self.window():
                return
            editable = (QLineEdit, QAbstractSpinBox, QPlainTextEdit, QTextEdit)
            if isinstance(current, editable) and not current.isReadOnly():
                return
        self.composer.setFocus()

    def set_compare(self, count: int | None) -> None:
        """Name what Send does: one reply, or ``count`` settings side by side."""
        self.send_button.setText("Send" if count is None else f"Send ×{count}")
        self.send_button.setToolTip("" if count is None else f"Answer with {count} settings side by side")

    def _on_color_toggled(self, on: bool) -> None:
        self.chat.set_color_tokens(on)
        self.legend.setText(color_legend(self.colors, *self.chat.kinds) if on else "")
        self.legend.setToolTip(legend_tooltip(*self.chat.kinds) if on else "")
