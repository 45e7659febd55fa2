"""The Sampling dock's *Structured output* section: the grammar the next reply is written
under (the ``grammar`` field: none, any JSON object, a JSON schema, a regex, a Lark or GBNF
grammar), typed, opened from a file or taken from a preset (``app.model.structured``).

The text is read after a pause in typing or on leaving it (``LinesEdit``), so a reply being
written is not re-constrained at every letter; a grammar llguidance cannot compile is shown
with its message right under the text, outlined, and never sent. While a server is in use
the section says what its numbers are under a grammar
(``engine.remote.structured.grammar_note``).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QGroupBox,
    QLabel,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.model.structured import FILE_FILTER, GRAMMAR_PRESETS, KIND_CHOICES, PLACEHOLDERS, read_grammar_file
from app.views.file_dialogs import GRAMMARS, Folders
from app.views.fitting import WrapRow
from app.views.lines_edit import LinesEdit
from app.views.param_fields import mark_error
from app.views.wheel_guard import wheel_only_when_focused

TEXT_TIP = (
    "The JSON schema, regex or grammar (compiled by llguidance, as llama.cpp, vLLM and SGLang do); "
    "every token of the reply keeps it valid, and the inspector shows what it removed."
)
ERROR_COLOR = "#d93025"


class StructuredOutputBox(QGroupBox):
    changed = Signal()  # the grammar shown changed (a choice, a preset, a file, a pause in typing)

    def __init__(self, folders: Folders | None = None) -> None:
        super().__init__("Structured output")
        self.folders = folders if folders is not None else Folders(None)
        self.kind = QComboBox()
        for label, kind in KIND_CHOICES:
            self.kind.addItem(label, kind)
        self.kind.setToolTip("What the reply must follow: nothing, any JSON object, a schema, a regex or a grammar.")
        wheel_only_when_focused(self.kind)
        self.kind.currentIndexChanged.connect(self._on_kind)
        self.presets = QToolButton()
        self.presets.setText("Presets")
        self.presets.setToolTip("A grammar to start from (it replaces the text)")
        self.presets.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.presets)
        for name in GRAMMAR_PRESETS:
            menu.addAction(name, lambda n=name: self.apply_preset(n))
        self.presets.setMenu(menu)
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("Read a .json schema, a .lark or .gbnf grammar, or a .regex file")
        self.open_button.clicked.connect(lambda: self.open_file())
        self.text = LinesEdit(TEXT_TIP, rows=6)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setTabChangesFocus(True)
        self.text.edited.connect(self.changed)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR_COLOR}")
        self.error.hide()
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setEnabled(False)
        # Side by side where they fit, the buttons under the choice in a narrow dock.
        self.kind.setMinimumContentsLength(8)
        self.kind.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(WrapRow([(self.kind, 1), (self.presets, 0), (self.open_button, 0)]))
        layout.addWidget(self.text)
        layout.addWidget(self.error)
        layout.addWidget(self.note)
        self._server_note = ""
        self._show_kind()

    # Values ---------------------------------------------------------------------------------

    def current_kind(self) -> str:
        return self.kind.currentData() or ""

    def value(self) -> tuple[str, ...]:
        """The ``grammar`` field shown: () for none, else (kind, text)."""
        kind = self.current_kind()
        if not kind:
            return ()
        return (kind, "" if kind == "json" else self.text.toPlainText())

    def set_value(self, grammar: tuple[str, ...]) -> None:
        """Show ``grammar`` (no ``changed``)."""
        self.blockSignals(True)
        try:
            kind, text = (grammar[0], grammar[1]) if grammar else ("", "")
            self.kind.setCurrentIndex(max(0, self.kind.findData(kind)))
            if kind and kind != "json":
                self.text.blockSignals(True)
                self.text.setPlainText(text)
                self.text.blockSignals(False)
        finally:
            self.blockSignals(False)
        self._show_kind()

    def widget_for_error(self) -> QWidget:
        """What is outlined when the grammar is refused: the text, or the choice for any JSON."""
        return self.kind if self.current_kind() in ("", "json") else self.text

    def set_error(self, message: str) -> None:
        """llguidance's (or the server's) refusal, right under the text, its widget outlined
        ("" clears both)."""
        for widget in (self.text, self.kind):
            mark_error(widget, "")
        if message:
            mark_error(self.widget_for_error(), message)
        self.error.setText(message)
        self.error.setVisible(bool(message))

    def set_server_note(self, note: str) -> None:
        """What a server's numbers are under a grammar ("" for the local engine)."""
        self._server_note = note
        self._show_kind()

    # Choices --------------------------------------------------------------------------------

    def apply_preset(self, name: str) -> None:
        kind, text = GRAMMAR_PRESETS[name]
        self.set_value((kind, text))
        self.changed.emit()

    def open_file(self, path: str | None = None) -> bool:
        """Read a grammar file (a dialog when ``path`` is None); its suffix names its kind. A
        file that cannot be read says why in place and changes nothing."""
        if path is None:
            path = self.folders.open_file(self, GRAMMARS, "Open a schema or grammar", FILE_FILTER)
            if not path:
                return False
        try:
            grammar = read_grammar_file(path, self.current_kind())
        except ValueError as exc:
            self.set_error(str(exc))
            return False
        self.set_value(grammar)
        self.changed.emit()
        return True

    def _on_kind(self, _index: int) -> None:
        self._show_kind()
        self.changed.emit()

    def _show_kind(self) -> None:
        kind = self.current_kind()
        self.text.setVisible(kind not in ("", "json"))
        self.text.setPlaceholderText(PLACEHOLDERS.get(kind, ""))
        what = {
            "": "Off: the model writes freely.",
            "json": "Any JSON object: the reply is one, complete, and then it ends.",
        }.get(kind, "The reply follows it from its first token; once it is complete, the reply ends.")
        self.note.setText(f"{what} {self._server_note}".strip())
