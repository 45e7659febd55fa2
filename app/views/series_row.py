"""A timeline row drawing one value per token of the selected reply's analysis (Compare
models' KLD, the logit lens's decided-at layer, …): the one base they share.

The row is a plot of its own below the timeline's (``TimelineWidget.add_row``), X-linked to
them, hidden unless the selected reply has a result the row shows. It draws a curve and its
points from :meth:`SeriesRow.series` (a NaN is a token without a value: no point, a gap in
the curve), marks the selected token with a vertical line, and a click on it selects the
nearest token drawn, as on the other plots. A subclass names its place and label, says what
to draw (``VALUE``, the attribute of the result's rows, or :meth:`SeriesRow.series` itself),
and adds its own marks and title in :meth:`SeriesRow.decorate`; a result is redrawn
when another is shown or when it has grown (a job still filling it in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg

from app.views.timeline import TimelineWidget

SELECTION_COLOR = "#e8710a"


class SeriesRow:
    ROW = 0
    """The row's place among the timeline's plots (0 and 1 are its own)."""
    LABEL = ""
    SHORTER: Sequence[str] = ()
    """Shorter forms of ``LABEL`` for a short plot."""
    COLOR = "#9467bd"
    WIDTH = 1.5
    POINT_SIZE = 5
    VALUE = ""
    """The attribute of each of ``result.rows`` that :meth:`series` draws at its ``index``."""

    def __init__(self, timeline: TimelineWidget, on_select: Callable[[int], None]) -> None:
        self.timeline, self._on_select = timeline, on_select
        self.plot = timeline.add_row(self.ROW, self.LABEL, self.SHORTER)
        self.curve = self.plot.plot([], [], pen=pg.mkPen(self.COLOR, width=self.WIDTH))
        self.points = pg.ScatterPlotItem(size=self.POINT_SIZE, brush=pg.mkBrush(self.COLOR), pen=None)
        self.plot.addItem(self.points)
        self.add_items()
        self.selection_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(SELECTION_COLOR, width=1))
        self.plot.addItem(self.selection_line)
        self.shown: Any = None
        self.positions: list[int] = []
        """The tokens drawn (a click selects the nearest)."""
        self._drawn = -1  # the size of ``shown`` when it was drawn
        timeline.view.scene().sigMouseClicked.connect(self._on_click)
        self.plot.hide()

    # What a subclass says --------------------------------------------------------------------

    def add_items(self) -> None:
        """Add the row's own marks to ``plot`` (between the points and the selection line)."""

    def wanted(self, result: Any) -> bool:
        """``result`` has something this row shows."""
        return result is not None

    def size(self, result: Any) -> int:
        """How much of ``result`` is known: drawn again when this changes."""
        return len(result.rows)

    def series(self, result: Any) -> tuple[np.ndarray, np.ndarray]:
        """The tokens' positions and values (``[N] float``; NaN: no value): by default each
        of ``result.rows``'s ``index`` and ``VALUE``."""
        rows = result.rows
        x = np.fromiter((r.index for r in rows), float, len(rows))
        return x, np.fromiter((getattr(r, self.VALUE) for r in rows), float, len(rows))

    def decorate(self, result: Any, x: np.ndarray, y: np.ndarray) -> None:
        """The row's marks, range and title for ``result`` drawn as ``x``, ``y``."""

    # Drawing ----------------------------------------------------------------------------------

    def show(self, result: Any, selected: int | None = None) -> None:
        """Draw ``result`` (None, or one this row does not show: hide the row), token
        ``selected`` marked; redrawn only when it changed."""
        if not self.wanted(result):
            self.plot.hide()
            self.shown, self._drawn = None, -1
            return
        if result is not self.shown or self.size(result) != self._drawn:
            self._draw(result)
        if selected is not None and result.at(selected) is not None:
            self.selection_line.setPos(selected)
            self.selection_line.show()
        else:
            self.selection_line.hide()
        self.plot.show()

    def _draw(self, result: Any) -> None:
        self.shown, self._drawn = result, self.size(result)
        x, y = self.series(result)
        self.positions = [int(p) for p in x]
        self.curve.setData(x, y, connect="finite")
        known = np.isfinite(y)
        self.points.setData(x[known], y[known])
        self.decorate(result, x, y)

    def _on_click(self, event: Any) -> None:
        if self.shown is None or not self.plot.isVisible() or not self.positions:
            return
        if not self.plot.sceneBoundingRect().contains(event.scenePos()):
            return
        x = self.plot.vb.mapSceneToView(event.scenePos()).x()
        self._on_select(min(self.positions, key=lambda p: abs(p - x)))
