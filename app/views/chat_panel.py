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
from app.views.fitting import WrapRow
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


COLOR_SWITCH = "Colour tokens by probability"
LEGEND_FORMS = (
    (COLOR_SWITCH, "p(final) of the chosen token: "),
    (COLOR_SWITCH, "p(final): "),
    ("Colour by p(final)", ""),
)
"""The colour switch's words and the legend's, longest first: the first pair whose row
fits is shown (else the first, the legend under the switch). A drawn token is shaded by
its probability after the last stage, a scored text's by the raw distribution its
perplexity comes from (``app.model.scored``): the words name what the chat shows."""
SCORED_FORMS = (
    (COLOR_SWITCH, "p(raw) of the scored token: "),
    (COLOR_SWITCH, "p(raw): "),
    ("Colour by p(raw)", ""),
)
BOTH_FORMS = (
    (COLOR_SWITCH, "p(raw) scored · p(final) drawn: "),
    (COLOR_SWITCH, "raw scored · final drawn: "),
    ("Colour by p(raw) · p(final)", ""),
)


def legend_forms(scored: bool, drawn: bool) -> tuple[tuple[str, str], ...]:
    """The switch's and the legend's words for the kinds of tokens the chat shows."""
    return BOTH_FORMS if scored and drawn else SCORED_FORMS if scored else LEGEND_FORMS


DRAFT_SWITCH = "Colour by draft outcome"
DRAFT_TIP = (
    "Colour each token of a reply written with a draft model by what became of the draft's "
    "proposal there: accepted (the model drew the same token), drawn by the model after a "
    "rejection, or a bonus token (the model's extra one after a whole block was accepted)."
)
DRAFT_FORMS = ((COLOR_SWITCH, "draft: "), (COLOR_SWITCH, ""))


def outcome_legend(colors: Colors) -> str:
    """The legend's cells for the draft's outcomes (HTML)."""
    cells = ((colors.accepted, "accepted"), (colors.rejected, "drawn after a rejection"), (colors.bonus, "bonus"))
    return "".join(f"<span style='background-color:{c}'>&nbsp;{words}&nbsp;</span> " for c, words in cells)


class LegendRow(WrapRow):
    """The colour switch and, while it is on, the legend of the colours beside it, in the
    longest words that fit one row; under it where even the shortest do not. ``draft``: the
    switch to colour by a draft model's outcomes (hidden while no such reply is shown)."""

    def __init__(self, switch: QCheckBox, legend: QLabel, draft: QCheckBox | None = None) -> None:
        super().__init__([(switch, 0), *([(draft, 0)] if draft is not None else []), (legend, 1)])
        self.switch, self.legend = switch, legend
        self.widths: list[int] = []  # each of self.forms side by side, measured
        self.forms = LEGEND_FORMS
        legend.setTextFormat(Qt.TextFormat.RichText)
        switch.setToolTip("Colour each token by p(final): the chosen token's probability after the last stage")
        self.set_cells("")

    def set_cells(self, cells: str, scored: bool = False, drawn: bool = True, draft: bool = False) -> None:
        """The legend's colour cells (HTML; "" while the switch is off) for a chat showing
        scored and/or drawn tokens (``draft``: the cells are a draft's outcomes)."""
        self.cells, self.forms = cells, DRAFT_FORMS if draft else legend_forms(scored, drawn)
        self.widths = []
        for words in self.forms:  # measured once here, not while the layout asks
            self._show_words(*words)
            self.widths.append(self.side_by_side_width())
        self.arrange(self.width())

    def fits(self, width: int) -> bool:
        return any(w <= width for w in self.widths)

    def arrange(self, width: int) -> None:
        fitting = next((i for i, w in enumerate(self.widths) if w <= width), 0)
        self._show_words(*self.forms[fitting])
        super().arrange(width)

    def _show_words(self, switch: str, legend: str) -> None:
        if self.switch.text() != switch:
            self.switch.setText(switch)
        html = legend + self.cells if self.cells else ""
        if self.legend.text() != html:
            self.legend.setText(html)


class ChatPanel(QWidget):
    def __init__(self, system_prompt: str) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.system_prompt = QLineEdit(system_prompt)
        self.system_prompt.setPlaceholderText("System prompt (empty: none)")
        self.chat = ChatView()
        self.legend = QLabel()
        self.color_toggle = QCheckBox(COLOR_SWITCH)
        self.color_toggle.toggled.connect(self._on_color_toggled)
        # Shown while a reply written with a draft model is: colour by its outcomes instead.
        self.draft_toggle = QCheckBox(DRAFT_SWITCH)
        self.draft_toggle.setToolTip(DRAFT_TIP)
        self.draft_toggle.hide()
        self.draft_toggle.toggled.connect(self._on_draft_toggled)
        self.legend_row = LegendRow(self.color_toggle, self.legend, self.draft_toggle)
        self.chat.kinds_changed.connect(lambda *_: self._on_color_toggled(self.color_toggle.isChecked()))
        self.chat.drafts_changed.connect(self._on_drafts_changed)
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
        buttons = QVBoxLayout()
        for button in (self.send_button, self.stop_button, self.regen_button):
            buttons.addWidget(button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.composer, 1)
        bottom.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.chat, 1)
        layout.addWidget(self.legend_row)
        layout.addLayout(bottom)

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self.chat.set_colors(colors)
        if self.draft_toggle.isChecked():
            self._on_draft_toggled(True)
        else:
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
        if on and self.draft_toggle.isChecked():
            self.draft_toggle.setChecked(False)  # one colouring at a time
        if self.draft_toggle.isChecked():
            return
        self.chat.set_color_tokens(on)
        self.legend_row.set_cells(color_legend(self.colors) if on else "", *self.chat.kinds)
        self.legend.setToolTip(legend_tooltip(*self.chat.kinds) if on else "")

    def _on_draft_toggled(self, on: bool) -> None:
        if on and self.color_toggle.isChecked():
            self.color_toggle.setChecked(False)
        if not on:
            self._on_color_toggled(self.color_toggle.isChecked())
            return
        self.chat.set_color_tokens(False, by_draft=True)
        self.legend_row.set_cells(outcome_legend(self.colors), draft=True)
        self.legend.setToolTip(DRAFT_TIP)

    def _on_drafts_changed(self, drafted: bool) -> None:
        if not drafted and self.draft_toggle.isChecked():
            self.draft_toggle.setChecked(False)
        self.draft_toggle.setVisible(drafted)
        self.legend_row.set_cells(self.legend_row.cells, *self.chat.kinds, draft=self.draft_toggle.isChecked())
