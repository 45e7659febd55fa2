"""Fields that take the mouse wheel only when they have the keyboard focus.

Qt's sliders, spin boxes and combo boxes change their value under a wheel that merely passes
over them: scrolling the Sampling dock with the pointer over the temperature moved it from 0.70
to 0.68 without a word. A guarded field takes the focus by a click or Tab only (not by the
wheel), and a wheel event over it without the focus is ignored, so Qt hands it on to the
parents: the panel's scroll area scrolls instead.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QWidget


class _WheelGuard(QObject):
    """An event filter on one field: its wheel events go on to its parents unless it has the focus."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.Wheel and isinstance(watched, QWidget) and not watched.hasFocus():
            event.ignore()  # an ignored wheel event propagates to the parent widgets
            return True
        return False


def wheel_only_when_focused(*widgets: QWidget) -> None:
    """The mouse wheel changes each of ``widgets`` only while it has the focus."""
    for widget in widgets:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a click or Tab gives the focus, the wheel not
        widget.installEventFilter(_WheelGuard(widget))
