"""Labels on the inspector's bar plots that stay readable with 100 candidates.

``LabelPool`` keeps one plot's text items: made once, then reused by position and
hidden when not needed (creating ~100 ``TextItem``s a redraw costs milliseconds, and
items removed through their view box stayed in the ``PlotItem``'s list). Every redraw
places the labels it needs from the start of the pool, so no label of an earlier token
survives on a row it no longer describes. ``thinned_rows`` names only rows a line
apart (the chosen one always); ``fit_text`` picks the longest axis title that fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtGui import QFontMetrics

MAX_NAME_CHARS = 12


class LabelPool:
    def __init__(self, plot: pg.PlotItem) -> None:
        self.plot = plot
        self.items: list[pg.TextItem] = []
        self.used = 0

    def begin(self) -> None:
        self.used = 0

    def place(self, text: str, color: str, x: float, y: float, anchor: tuple[float, float] = (0, 0.5)) -> None:
        if self.used == len(self.items):
            item = pg.TextItem()
            self.plot.addItem(item, ignoreBounds=True)
            self.items.append(item)
        item = self.items[self.used]
        self.used += 1
        item.setText(text, color=color)
        item.setAnchor(anchor)
        item.setPos(x, y)
        item.setVisible(True)

    def end(self) -> None:
        """Hide the labels this redraw did not place."""
        for item in self.items[self.used :]:
            if item.isVisible():
                item.setVisible(False)

    def shown(self) -> list[pg.TextItem]:
        return self.items[: self.used]


def row_stride(rows: int, pixels: float, line: float) -> int:
    """Name every ``stride``-th of ``rows`` rows drawn over ``pixels`` so names are a
    ``line`` apart (1 while the plot has no size yet)."""
    if rows <= 0 or pixels <= 0:
        return 1
    pitch = pixels / (rows + 0.2)  # the y range is -0.6 … rows - 0.4
    return max(1, math.ceil(line / pitch))


def thinned_rows(rows: int, stride: int, keep: int | None) -> list[int]:
    """Every ``stride``-th row, and ``keep`` (the chosen token) in place of its neighbours."""
    shown = [r for r in range(0, rows, stride) if keep is None or abs(r - keep) >= stride]
    if keep is not None and 0 <= keep < rows:
        shown.append(keep)
    return sorted(shown)


def elide(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "…"


def fit_text(metrics: QFontMetrics, width: float, choices: Sequence[str]) -> str:
    """The first of ``choices`` (longest first) that fits in ``width`` pixels, else the last."""
    for text in choices:
        if metrics.horizontalAdvance(text) + 8 <= width:
            return text
    return choices[-1]
