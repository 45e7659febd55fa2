"""A list of strings edited one per line (stop strings, DRY sequence breakers).

One string per line, with ``\\n``, ``\\t`` and ``\\\\`` escapes (app/model/param_text.py), so any
text can be an entry — ``<|im_end|>`` too, which a separator such as ``|`` would split.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QFocusEvent
from PySide6.QtWidgets import QPlainTextEdit

from app.model.param_text import format_breakers, parse_breakers

IDLE_MS = 700


class LinesEdit(QPlainTextEdit):
    """``edited`` fires on leaving the box or after a pause in typing, not per keystroke, so
    a live reply is not re-parameterized at every letter."""

    edited = Signal()

    def __init__(self, tip: str, rows: int = 5, placeholder: str = "") -> None:
        super().__init__()
        self.setToolTip(tip)
        self.setPlaceholderText(placeholder)
        self.setTabChangesFocus(True)
        self.setFixedHeight(self.fontMetrics().lineSpacing() * rows + 12)
        self._idle = QTimer(self)
        self._idle.setSingleShot(True)
        self._idle.setInterval(IDLE_MS)
        self._idle.timeout.connect(self.edited)
        self.textChanged.connect(self._idle.start)

    def lines(self) -> tuple[str, ...]:
        return parse_breakers(self.toPlainText())

    def set_lines(self, lines: tuple[str, ...]) -> None:
        self.blockSignals(True)
        self.setPlainText(format_breakers(lines))
        self.blockSignals(False)
        self._idle.stop()

    def focusOutEvent(self, event: QFocusEvent) -> None:
        if self._idle.isActive():
            self._idle.stop()
            self.edited.emit()
        super().focusOutEvent(event)
