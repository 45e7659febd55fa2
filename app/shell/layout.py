"""The window's dock layout: minimum sizes, the default arrangement, View → Reset layout.

Qt's main window keeps its docks' sizes when the window shrinks and takes the difference
from the central widget, so on a small window the chat was squeezed to a strip while the
docks kept their width. Each part now has a minimum under which it stops being usable; the
chat's is the largest, so the docks give way first, down to their own minimums. On a short
window the timeline gives way too, down to its minimum, before the chat's text area goes
below ``CHAT_TEXT_HEIGHT``; a row added to the timeline (a scored text's surprisal, …)
makes it taller by the row's height where the window has room, and shorter again when
the row goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import QApplication, QDockWidget, QMainWindow, QWidget

from app.views.chat_panel import MIN_WIDTH as MIN_CHAT_WIDTH
from app.views.sampling_panel import SamplingPanel
from app.views.status import StatusWidgets
from app.views.timeline import TimelineWidget

INSPECTOR_WIDTH, TIMELINE_HEIGHT = 600, 200  # the default sizes (at the default 1400×860)
INSPECTOR_MIN_WIDTH = 260  # its table's token and two probability columns
SAMPLING_MIN_WIDTH = 170  # its fields go under their labels: no sideways scrolling
TIMELINE_MIN_HEIGHT = 100  # at least; the timeline's own minimum follows its rows (app/views/timeline_rows.py)
CHAT_TEXT_HEIGHT = 250  # the timeline gives way before the chat's text area goes below this
WINDOW_MIN = (800, 560)  # the three minimum widths above and the chat's, side by side


@dataclass(frozen=True)
class Docks:
    """The window and the parts its layout arranges (what this module reads and resizes)."""

    window: QMainWindow
    inspector_dock: QDockWidget
    timeline_dock: QDockWidget
    controls_dock: QDockWidget
    panel: SamplingPanel
    inspector: QWidget
    timeline: TimelineWidget
    chat: QWidget


def comfortable_sampling_width(panel: SamplingPanel) -> int:
    """The sampling panel's width with nothing cut off: its content's minimum, the vertical
    scroll bar and the frame (below it the panel scrolls sideways)."""
    scroll = panel.controls.scroll
    content = scroll.widget().minimumSizeHint().width()
    return content + scroll.verticalScrollBar().sizeHint().width() + 2 * scroll.frameWidth() + 4


def fit_sampling_minimum(panel: SamplingPanel, window_width: int) -> bool:
    """Where the window has room (1000 px is plenty), the sampling panel is not squeezed
    below its content (the inspector, whose table scrolls, gives way first); on a smaller
    window it may go down to ``SAMPLING_MIN_WIDTH`` and scroll sideways."""
    room = window_width - MIN_CHAT_WIDTH - INSPECTOR_MIN_WIDTH - 24  # separators and margins
    width = max(SAMPLING_MIN_WIDTH, min(comfortable_sampling_width(panel), room))
    if width == panel.minimumWidth():
        return False
    panel.setMinimumWidth(width)
    return True


def _docked(window: QMainWindow, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
    """``widget`` in a new dock of ``window``, added in ``area``."""
    dock = QDockWidget(title, window)
    dock.setObjectName(name)  # what saveState and restoreState know it by
    dock.setWidget(widget)
    window.addDockWidget(area, dock)
    return dock


def add_docks(
    window: QMainWindow, inspector: QWidget, timeline: QWidget, panel: QWidget
) -> tuple[QDockWidget, QDockWidget, QDockWidget]:
    """The inspector, the timeline and the sampling panel in docks of ``window``, added in
    the default arrangement's order (the order decides which dock takes the corners)."""
    docks = []
    for title, name, widget, area in (
        ("Inspector", "inspector", inspector, Qt.DockWidgetArea.RightDockWidgetArea),
        ("Timeline", "timeline", timeline, Qt.DockWidgetArea.BottomDockWidgetArea),
        ("Sampling", "sampling", panel, Qt.DockWidgetArea.LeftDockWidgetArea),
    ):
        docks.append(_docked(window, title, name, widget, area))
    return docks[0], docks[1], docks[2]


def tabbed_dock(window: QMainWindow, beside: QDockWidget, title: str, name: str, widget: QWidget) -> QDockWidget:
    """A dock of ``window`` holding ``widget``, tabbed with ``beside`` in the left area and
    hidden until its controller shows it (the Served list beside the sampling panel);
    *Reset layout* tabs it there again."""
    dock = _docked(window, title, name, widget, Qt.DockWidgetArea.LeftDockWidgetArea)
    window.tabifyDockWidget(beside, dock)
    dock.hide()
    beside.raise_()
    return dock


def set_minimum_sizes(docks: Docks) -> None:
    docks.inspector.setMinimumWidth(INSPECTOR_MIN_WIDTH)
    docks.panel.setMinimumWidth(SAMPLING_MIN_WIDTH)
    docks.window.setMinimumSize(*WINDOW_MIN)


def default_arrangement(docks: Docks) -> list:
    """(dock, area), in the order the window first adds them (the order decides which dock
    takes the corners)."""
    return [
        (docks.inspector_dock, Qt.DockWidgetArea.RightDockWidgetArea),
        (docks.timeline_dock, Qt.DockWidgetArea.BottomDockWidgetArea),
        (docks.controls_dock, Qt.DockWidgetArea.LeftDockWidgetArea),
    ]


def default_sizes(docks: Docks) -> None:
    window = docks.window
    window.resizeDocks([docks.inspector_dock], [INSPECTOR_WIDTH], Qt.Orientation.Horizontal)
    # Room for every row shown, not a fixed height that crushed four rows; a short
    # window's chat still gets its room first (``DockMemory.fit_chat``).
    timeline = max(TIMELINE_HEIGHT, docks.timeline.rows.roomy_height())
    window.resizeDocks([docks.timeline_dock], [timeline], Qt.Orientation.Vertical)
    panel = docks.panel.sizeHint().width()
    window.resizeDocks([docks.controls_dock], [max(panel, SAMPLING_MIN_WIDTH)], Qt.Orientation.Horizontal)


def reset_layout(docks: Docks, status: StatusWidgets) -> None:
    """View → Reset layout: every dock back in its area (not floating, not tabbed, shown)
    at its default size."""
    arrangement = default_arrangement(docks)
    for dock, _ in arrangement:
        dock.setFloating(False)  # before it leaves: a floating dock added back stays floating
        docks.window.removeDockWidget(dock)
    for dock, area in arrangement:
        docks.window.addDockWidget(area, dock)
        dock.show()
    # A dock the window tabs beside the sampling panel (Served, while serving): tabbed with
    # it again. Sampling, removed and added back, was placed below it (stacked, ~170 px).
    placed = {dock for dock, _ in arrangement}
    left = Qt.DockWidgetArea.LeftDockWidgetArea
    for dock in docks.window.findChildren(QDockWidget):
        if dock not in placed and not dock.isFloating() and docks.window.dockWidgetArea(dock) == left:
            docks.window.tabifyDockWidget(docks.controls_dock, dock)
    docks.controls_dock.raise_()
    default_sizes(docks)
    status.show_message("The default layout is back.")


class DockMemory(QObject):
    """Gives the docks back the size they gave up when the window grows again.

    Each docked dock's wanted size is the one it last had by the user's (or Reset layout's)
    doing: a dock resized while the window kept its size. When the window shrinks, Qt
    squeezes the docks; when it grows, every dock smaller than its wanted size gets it back
    as far as the new room allows, so a few resizes do not leave a layout of slivers.
    """

    def __init__(self, docks: Docks) -> None:
        super().__init__(docks.window)
        self.parts = docks
        self.window = window = docks.window
        self.docks = [dock for dock, _ in default_arrangement(docks)]
        self.wanted: dict[QDockWidget, int] = {}
        self.window_size = QSize()
        self._adjusting = False
        self.timeline_rows = docks.timeline.rows.count
        self.grown: list[int] = []  # what each row added to the timeline made it taller by
        for dock in self.docks:
            dock.installEventFilter(self)
        window.installEventFilter(self)
        docks.timeline.rows_changed.connect(self.rows_changed)

    def extent(self, dock: QDockWidget) -> tuple[int, Qt.Orientation]:
        area = self.window.dockWidgetArea(dock)
        if area in (Qt.DockWidgetArea.TopDockWidgetArea, Qt.DockWidgetArea.BottomDockWidgetArea):
            return dock.height(), Qt.Orientation.Vertical
        return dock.width(), Qt.Orientation.Horizontal

    def docked(self, dock: QDockWidget) -> bool:
        return not dock.isFloating() and not dock.isHidden()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() == QEvent.Type.Show:
            self.fit_chat()  # laid out for the first time: a short window's chat gets its room
        if event.type() != QEvent.Type.Resize:
            return False
        if watched is self.window:
            old, new = event.oldSize(), event.size()
            self.window_size = new
            fit_sampling_minimum(self.parts.panel, new.width())
            if not self.wanted:  # shown: the sizes it opens with are the wanted ones
                self.remember()
            elif old.isValid() and (old.width() < new.width() or old.height() < new.height()):
                self.give_back()
            self.fit_chat()
        elif self.window.size() == self.window_size and not self._adjusting:
            dock = watched
            if isinstance(dock, QDockWidget) and self.docked(dock):
                size, along = self.extent(dock)
                hint = dock.minimumSizeHint()
                # At its minimum a dock was squeezed (a layout after a new minimum width),
                # not sized by the user.
                if size > (hint.width() if along == Qt.Orientation.Horizontal else hint.height()):
                    self.wanted[dock] = size
        return False

    def remember(self) -> None:
        for dock in self.docks:
            if self.docked(dock):
                self.wanted[dock] = self.extent(dock)[0]

    def resize(self, docks: list[QDockWidget], sizes: list[int], orientation: Qt.Orientation) -> None:
        """Resize docks now, as the layout's doing (not remembered as the user's sizes)."""
        self._adjusting = True
        try:
            self.window.resizeDocks(docks, sizes, orientation)
            # Lay out now, so the docks' resizes are known as ours, not the user's.
            QApplication.sendPostedEvents(self.window, QEvent.Type.LayoutRequest)
        finally:
            self._adjusting = False

    def give_back(self) -> None:
        for orientation in (Qt.Orientation.Horizontal, Qt.Orientation.Vertical):
            short = []
            for dock in self.docks:
                size, along = self.extent(dock)
                wanted = self.wanted.get(dock, 0)
                if along == orientation and self.docked(dock) and size < wanted:
                    short.append((dock, wanted))
            if short:
                self.resize([d for d, _ in short], [w for _, w in short], orientation)

    def fit_chat(self) -> None:
        """On a short window the timeline gives way, down to its minimum, before the chat's
        text area goes below ``CHAT_TEXT_HEIGHT`` (its wanted size stays for a taller one)."""
        dock = self.parts.timeline_dock
        short = CHAT_TEXT_HEIGHT - self.parts.chat.height()
        size, along = self.extent(dock)
        if short <= 0 or along != Qt.Orientation.Vertical or not self.docked(dock) or not self.window.isVisible():
            return
        target = max(dock.minimumSizeHint().height(), size - short)
        if target < size:
            self.resize([dock], [target], along)

    def rows_changed(self, count: int) -> None:
        """A row added to the timeline makes it taller by a row's height (as far as the
        window has room); a row gone gives back what its coming took."""
        added, self.timeline_rows = count - self.timeline_rows, count
        dock = self.parts.timeline_dock
        if not self.window.isVisible():
            # Not laid out yet (a start: the saved layout restored, the last conversation
            # opened): the dock's height is not the one it will have, and resizing from it
            # replaced the restored height (180 px at quit came back ~70 px).
            return
        size, along = self.extent(dock)
        if added == 0 or along != Qt.Orientation.Vertical or not self.docked(dock):
            return
        if added > 0:
            self.resize([dock], [size + added * self.parts.timeline.rows.roomy_row_height()], along)
            grown = max(self.extent(dock)[0] - size, 0)
            self.grown += [grown // added] * added
        else:
            given = sum(self.grown.pop() for _ in range(min(-added, len(self.grown))))
            self.resize([dock], [size - given], along)
            grown = -given
        if dock in self.wanted:
            self.wanted[dock] += grown
