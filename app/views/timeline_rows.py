"""The timeline's plots, one per row, sharing the token axis.

Every row is X-linked to the first; only the lowest row shown carries the token axis's
numbers (the others repeated them, and three rows of axes left the curves a sliver each),
and its title ``token`` only where each row keeps ``TITLED_LINES`` lines beside it. The
widget holding them is at least as tall as its shown rows need: a row gets ``ROW_LINES``
text lines, and a row added (a scored text's surprisal, a comparison's KLD, the logit lens)
asks for ``ROOMY_LINES`` more (``changed``: the window's layout makes the timeline that
much taller where it has room), instead of squashing the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyqtgraph as pg
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QWidget

from app.views.plot_axes import ValueAxis
from app.views.timeline_marks import TokenAxis

ROW_LINES = 2
"""A row's least height in text lines: room for two value labels a label apart."""
ROOMY_LINES = 5
"""What a row added to the timeline asks for, in text lines (what each of the two first
rows has at the timeline's first height)."""
READABLE_LINES = 3
"""A row's plot is readable from this many text lines (its values a line apart); View →
Reset layout gives each row shown ``ROOMY_LINES``, well above it."""
AXIS_LINES = 1.6
"""The token axis's numbers under the lowest row."""
TITLE_LINES = 1.2
"""The token axis's title, ``token``."""
TITLED_LINES = 3
"""The token axis is titled where every row keeps this many lines beside the title."""
MARGINS, SPACING = (4, 4, 8, 2), 2  # around and between the rows, in pixels


class PlotRows:
    def __init__(self, view: pg.GraphicsLayoutWidget, holder: QWidget, chrome: QWidget) -> None:
        """``holder``: the widget whose minimum height follows the rows; ``chrome``: what
        it shows above the plots (its height counts too)."""
        self.view, self.holder, self.chrome = view, holder, chrome
        self.plots: list[tuple[int, pg.PlotItem]] = []
        view.ci.setContentsMargins(*MARGINS)  # the style's margins and spacing took a row's height
        view.ci.setSpacing(SPACING)
        self.count = 0
        self.changed: Callable[[int], None] = lambda _count: None
        """Called with the number of rows shown when it changes."""

    def add(self, row: int, title: str, shorter: Sequence[str] = ()) -> pg.PlotItem:
        """A plot in ``row``, titled ``title`` (``shorter``: forms for a short plot)."""
        axes = {"bottom": TokenAxis(), "left": ValueAxis(shorter=shorter)}
        plot = self.view.addPlot(row=row, col=0, axisItems=axes)
        plot.setLabel("left", title)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=True, y=False)
        plot.showGrid(x=False, y=True, alpha=0.2)
        if self.plots:
            plot.setXLink(self.plots[0][1])
        self.plots = sorted([*self.plots, (row, plot)], key=lambda rp: rp[0])
        plot.visibleChanged.connect(self.fit)
        self.fit()
        return plot

    def set_colors(self, foreground: str) -> None:
        """A new theme: the rows' titles and axis labels in its text colour. pyqtgraph reads
        its foreground when a label's text is set, so a row's title (the draft-acceptance
        legend) kept the theme it was drawn in."""
        for _, plot in self.plots:
            plot.titleLabel.setText(plot.titleLabel.text, color=foreground)
            for name in ("left", "bottom"):
                plot.getAxis(name).setTextPen(pg.mkPen(foreground))

    def shown(self) -> list[pg.PlotItem]:
        return [plot for _, plot in self.plots if plot.isVisible()]

    def roomy_row_height(self) -> int:
        """The height a row added to the timeline asks for (``ROOMY_LINES`` lines)."""
        return ROOMY_LINES * QFontMetrics(self.holder.font()).height()

    def roomy_height(self) -> int:
        """The holder's height with ``ROOMY_LINES`` for each row shown (at least two) and
        the token axis titled: the timeline's default height (View → Reset layout)."""
        return self.minimum_height(max(len(self.shown()), 2), ROOMY_LINES, title=True)

    def line(self) -> int:
        return QFontMetrics(self.holder.font()).height()

    def minimum_height(self, rows: int, row_lines: float = ROW_LINES, title: bool = False) -> int:
        """The holder's height for ``rows`` rows of ``row_lines`` lines (and the title)."""
        chrome = self.chrome.sizeHint().height() + 2  # the layout's spacing
        plots = (rows * row_lines + AXIS_LINES + (TITLE_LINES if title else 0)) * self.line()
        return round(chrome + MARGINS[1] + MARGINS[3] + SPACING * (rows - 1) + plots)

    def fit(self) -> None:
        """The token axis under the lowest row shown only (titled where there is room); the
        holder tall enough for the rows."""
        shown = self.shown()
        lowest = shown[-1] if shown else None
        titled = self.holder.height() >= self.minimum_height(len(shown), TITLED_LINES, title=True)
        line = self.line()
        changed = False
        for _, plot in self.plots:
            axis = plot.getAxis("bottom")
            last = plot is lowest
            # Every row its least height (the layout shared a short timeline unevenly).
            least = round((ROW_LINES + (AXIS_LINES + (TITLE_LINES if titled else 0) if last else 0)) * line)
            if plot.minimumHeight() != least:
                plot.setMinimumHeight(least)
                changed = True
            if axis.style["showValues"] != last:
                axis.setStyle(showValues=last)
            title = "token" if last and titled else ""
            if axis.labelText != title:
                plot.setLabel("bottom", title or None)
                axis.setToolTip("" if title or not last else "token")
        if changed:  # the view set its rows' geometry under the old minimums: again
            self.view.setRange(self.view.range, padding=0, disableAutoPixel=False)
        self.holder.setMinimumHeight(self.minimum_height(max(len(shown), 2)))
        if len(shown) != self.count:
            self.count = len(shown)
            self.changed(self.count)
