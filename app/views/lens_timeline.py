"""The timeline's *decided at layer* row (the logit lens of every token): for each token of
the selected reply, the first layer from which the chosen token stays the most likely —
low where the model knew early, at the last layer where only the last block settled it,
and ✕ above the last layer where the token was never the top choice (it was drawn from
lower down). A :class:`app.views.series_row.SeriesRow`, shown while the selected reply's
lens of every token is being read or has been (:class:`app.model.logit_lens.ReplyLens`)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from app.model.logit_lens import ReplyLens
from app.views.series_row import SeriesRow

DECIDED_ROW = 4  # below Compare models' KLD row (3)
CURVE_COLOR = "#188038"
NEVER_COLOR = "#d62728"


class DecidedRow(SeriesRow):
    ROW, LABEL, COLOR, WIDTH, POINT_SIZE = DECIDED_ROW, "layer", CURVE_COLOR, 1, 6

    def add_items(self) -> None:
        self.never = pg.ScatterPlotItem(size=9, symbol="x", brush=pg.mkBrush(NEVER_COLOR), pen=None)
        self.last_line = pg.InfiniteLine(angle=0, movable=False, pen=pg.mkPen("#9aa0a6", style=Qt.PenStyle.DashLine))
        self.plot.addItem(self.never)
        self.plot.addItem(self.last_line)

    def wanted(self, lens: ReplyLens | None) -> bool:
        """Only a reply with a job over every token, once a position is read."""
        return lens is not None and lens.every and bool(lens.rows)

    def series(self, lens: ReplyLens) -> tuple[np.ndarray, np.ndarray]:
        positions, decided = lens.decided()
        x = np.array(positions, dtype=float)
        return x, np.array([np.nan if d is None else d for d in decided], dtype=float)

    def decorate(self, lens: ReplyLens, x: np.ndarray, y: np.ndarray) -> None:
        layers = lens.layers
        never_at = layers + max(1, round(layers / 5))  # apart from the last layer: both are labelled
        known = np.isfinite(y)
        self.never.setData(x[~known], np.full(int((~known).sum()), float(never_at)))
        self.last_line.setPos(layers)
        self.plot.setYRange(-0.5, never_at + 0.5, padding=0)
        # Three labels, far apart: the row is often short, and pyqtgraph drops labels that overlap.
        self.plot.getAxis("left").setTicks([[(0, "0"), (layers, str(layers)), (never_at, "never")], []])
        self.plot.setTitle(
            f"<span style='font-size:9pt'>Logit lens: the layer each token was decided at (of {layers}; "
            f"0 = the embedding) · <span style='color:{NEVER_COLOR}'>✕</span> never the most likely</span>"
        )
