"""The timeline's KLD row (Models → Compare models…): per token of a compared reply, KL(running
‖ second) in nats, the worst tokens ringed and labelled, the row titled with both models'
names and precisions. A :class:`app.views.series_row.SeriesRow`, hidden unless the selected
reply has a comparison (:class:`app.model.model_compare.Comparison`)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.model.model_compare import Comparison
from app.model.textfmt import escape, visible
from app.views.series_row import SeriesRow

KLD_ROW = 3  # below probability, entropy and a scored text's surprisal (row 2)
WORST_COLOR = "#d62728"
CURVE_COLOR = "#9467bd"


class KldRow(SeriesRow):
    ROW, LABEL, COLOR = KLD_ROW, "KLD (nats)", CURVE_COLOR
    VALUE = "kld"

    def add_items(self) -> None:
        self.worst = pg.ScatterPlotItem(size=13, brush=None, pen=pg.mkPen(WORST_COLOR, width=2))
        self.plot.addItem(self.worst)
        self.labels: list[pg.TextItem] = []
        self.worst_indices: list[int] = []

    def decorate(self, comparison: Comparison, x: np.ndarray, y: np.ndarray) -> None:
        worst = comparison.worst()
        self.worst_indices = [r.index for r in worst]
        self.worst.setData([float(r.index) for r in worst], [r.kld for r in worst])
        for label in self.labels:
            self.plot.removeItem(label)
        self.labels = []
        for r in worst:  # the token under its ring: which tokens the models disagree on most
            label = pg.TextItem(visible(comparison.piece(r.token_id))[:12], color=WORST_COLOR, anchor=(0.5, 1.15))
            label.setPos(r.index, r.kld)
            self.plot.addItem(label)
            self.labels.append(label)
        top = float(y.max()) if len(y) else 1.0
        self.plot.setYRange(0, top * 1.7 if top > 0 else 1.0, padding=0)  # room for the labels
        self.plot.setTitle(
            f"<span style='font-size:9pt'>{escape(comparison.title)} per token · "
            f"<span style='color:{WORST_COLOR}'>○</span> the {len(worst)} largest</span>"
        )
