"""The timeline's *surprise* row (Models → Surprise of every token): per token of the selected
reply, its surprise in bits under the model's own distribution (``raw``), the tokens the model
did not rank first ringed, the most surprising of them labelled with their rank. A
:class:`app.views.series_row.SeriesRow` of :class:`app.model.surprise.ReplySurprise`."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.model.surprise import ReplySurprise
from app.views.series_row import SeriesRow

SURPRISE_ROW = 5  # below the logit lens's decided-at row (4)
CURVE_COLOR = "#1f77b4"
UNEXPECTED_COLOR = "#d62728"


class SurpriseRow(SeriesRow):
    ROW, LABEL, SHORTER, COLOR = SURPRISE_ROW, "surprise (bits)", ("surprise", "bits"), CURVE_COLOR
    VALUE = "bits"

    def add_items(self) -> None:
        self.unexpected = pg.ScatterPlotItem(size=11, brush=None, pen=pg.mkPen(UNEXPECTED_COLOR, width=1.5))
        self.plot.addItem(self.unexpected)
        self.labels: list[pg.TextItem] = []

    def decorate(self, result: ReplySurprise, x: np.ndarray, y: np.ndarray) -> None:
        off = [r for r in result.rows if r.unexpected and np.isfinite(r.bits)]
        self.unexpected.setData([float(r.index) for r in off], [r.bits for r in off])
        for label in self.labels:
            self.plot.removeItem(label)
        self.labels = []
        for r in result.worst():
            words = f"#{r.rank}" if r.rank is not None else f">{r.held}"
            label = pg.TextItem(words, color=UNEXPECTED_COLOR, anchor=(0.5, 1.15))
            label.setPos(r.index, r.bits)
            self.plot.addItem(label)
            self.labels.append(label)
        finite = y[np.isfinite(y)]
        top = float(finite.max()) if len(finite) else 1.0
        self.plot.setYRange(0, top * 1.4 if top > 0 else 1.0, padding=0)  # room for the labels
        self.plot.setTitle(
            "<span style='font-size:9pt'>Surprise of each token under the model's own distribution "
            f"(raw, bits) · <span style='color:{UNEXPECTED_COLOR}'>○</span> not its most likely</span>"
        )
