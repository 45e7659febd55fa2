"""The timeline's *decided at layer* row (the logit lens of every token): for each token of
the selected reply, the first layer from which the chosen token stays the most likely —
low where the model knew early, at the last layer where only the last block settled it,
and ✕ above the last layer where the token was never the top choice (it was drawn from
lower down). A fifth plot of the timeline, X-linked to the others, shown while the
selected reply's lens of every token is being read or has been
(:class:`app.model.logit_lens.ReplyLens`); a click on it selects the nearest token."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from app.model.logit_lens import ReplyLens
from app.views.timeline import TimelineWidget

DECIDED_ROW = 4  # below Compare models' KLD row (3)
CURVE_COLOR = "#188038"
NEVER_COLOR = "#d62728"


class DecidedRow:
    def __init__(self, timeline: TimelineWidget, on_select: Callable[[int], None]) -> None:
        self.timeline, self._on_select = timeline, on_select
        self.plot = timeline.add_row(DECIDED_ROW, "layer")
        self.curve = self.plot.plot([], [], pen=pg.mkPen(CURVE_COLOR, width=1))
        self.points = pg.ScatterPlotItem(size=6, brush=pg.mkBrush(CURVE_COLOR), pen=None)
        self.never = pg.ScatterPlotItem(size=9, symbol="x", brush=pg.mkBrush(NEVER_COLOR), pen=None)
        self.last_line = pg.InfiniteLine(angle=0, movable=False, pen=pg.mkPen("#9aa0a6", style=Qt.PenStyle.DashLine))
        self.selection_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#e8710a", width=1))
        for item in (self.points, self.never, self.last_line, self.selection_line):
            self.plot.addItem(item)
        self.shown: ReplyLens | None = None
        self._drawn = -1  # positions drawn of ``shown``
        self.positions: list[int] = []
        timeline.view.scene().sigMouseClicked.connect(self._on_click)
        self.plot.hide()

    def show(self, lens: ReplyLens | None, selected: int | None = None) -> None:
        """Draw ``lens`` (None, or one without a job over every token: hide the row), token
        ``selected`` marked; redrawn only when positions arrived since."""
        if lens is None or not lens.every or not lens.rows:
            self.plot.hide()
            self.shown, self._drawn = None, -1
            return
        if lens is not self.shown or len(lens.rows) != self._drawn:
            self._draw(lens)
        if selected is not None and selected in lens.rows:
            self.selection_line.setPos(selected)
            self.selection_line.show()
        else:
            self.selection_line.hide()
        self.plot.show()

    def _draw(self, lens: ReplyLens) -> None:
        self.shown, self._drawn = lens, len(lens.rows)
        positions, decided = lens.decided()
        self.positions = positions
        layers = lens.layers
        never_at = layers + max(1, round(layers / 5))  # apart from the last layer: both are labelled
        x = np.array(positions, dtype=float)
        y = np.array([np.nan if d is None else d for d in decided], dtype=float)
        self.curve.setData(x, y, connect="finite")
        known = np.isfinite(y)
        self.points.setData(x[known], y[known])
        self.never.setData(x[~known], np.full(int((~known).sum()), float(never_at)))
        self.last_line.setPos(layers)
        self.plot.setYRange(-0.5, never_at + 0.5, padding=0)
        # Three labels, far apart: the row is often short, and pyqtgraph drops labels that overlap.
        self.plot.getAxis("left").setTicks([[(0, "0"), (layers, str(layers)), (never_at, "never")], []])
        self.plot.setTitle(
            f"<span style='font-size:9pt'>Logit lens: the layer each token was decided at (of {layers}; "
            f"0 = the embedding) · <span style='color:{NEVER_COLOR}'>✕</span> never the most likely</span>"
        )

    def _on_click(self, event) -> None:
        if self.shown is None or not self.plot.isVisible() or not self.positions:
            return
        if not self.plot.sceneBoundingRect().contains(event.scenePos()):
            return
        x = self.plot.vb.mapSceneToView(event.scenePos()).x()
        self._on_select(min(self.positions, key=lambda p: abs(p - x)))
