"""The window's Tab order: from the message box to its buttons, then the
Sampling dock, the inspector, the timeline, the system prompt, the chat and the colour switch,
and round to the message box; Shift+Tab goes the same way back.

Qt's own order is the order the widgets were made in, which put the inspector between Send
and the sampling panel and the system prompt last. Rearranging Qt's focus chain with
``QWidget.setTabOrder`` does not hold here: it skips containers, and moving a compound widget
(a tab widget and its pages) left part of the inspector in a ring of its own. So the window
answers Tab itself (``MainWindow.focusNextPrevChild`` calls :func:`focus_next`): each group's
tab stops in Qt's order within it, the groups in the order above.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QScrollArea, QWidget

from app.views.chat_panel import ChatPanel


def _tab_stops(group: QWidget) -> list[QWidget]:
    """The widgets inside ``group`` that Tab can reach, in the window's focus chain order.
    A widget whose focus goes to another (a spin box's line edit, a tab widget) is left out:
    the one it hands the focus to is the stop."""
    stops: list[QWidget] = []
    start = group.window()
    widget = start.nextInFocusChain()
    while widget is not start:
        takes_tab = bool(widget.focusPolicy() & Qt.FocusPolicy.TabFocus)
        if takes_tab and widget.focusProxy() is None and (widget is group or group.isAncestorOf(widget)):
            stops.append(widget)
        widget = widget.nextInFocusChain()
    return stops


def tab_order(central: ChatPanel, panel: QWidget, inspector: QWidget, timeline: QWidget) -> list[QWidget]:
    """Every tab stop of the window's own widgets, shown or not, in the order Tab visits them."""
    groups = [
        central.composer,
        central.send_button,
        central.stop_button,
        central.regen_button,
        panel,
        inspector,
        timeline,
        central.system_prompt,
        central.chat,
        central.color_toggle,
    ]
    return [stop for group in groups for stop in _tab_stops(group)]


def _reachable(widget: QWidget, window: QWidget) -> bool:
    # A floating dock is a window of its own, with its own Tab ring.
    return widget.isVisible() and widget.isEnabled() and widget.window() is window


def focus_next(window: QWidget, stops: list[QWidget], forward: bool) -> bool:
    """Move the focus to the next (or previous) reachable one of ``stops`` (``tab_order``'s);
    False when the focus is not on one of them (Qt's own order then applies)."""
    current = QApplication.focusWidget()
    if current not in stops:
        return False
    start = stops.index(current)
    step = 1 if forward else -1
    for k in range(1, len(stops) + 1):
        widget = stops[(start + step * k) % len(stops)]
        if _reachable(widget, window):
            reason = Qt.FocusReason.TabFocusReason if forward else Qt.FocusReason.BacktabFocusReason
            widget.setFocus(reason)
            _scroll_into_view(widget)
            return True
    return False


def _scroll_into_view(widget: QWidget) -> None:
    """A stop inside a scrolled panel (the Sampling dock) is scrolled into view, as Qt does."""
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QScrollArea) and parent.widget() is not None and parent.widget().isAncestorOf(widget):
            parent.ensureWidgetVisible(widget)
        parent = parent.parentWidget()
