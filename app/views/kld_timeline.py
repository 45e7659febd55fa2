"""The timeline's KLD row (Models → Compare models…): per token of a compared reply, KL(running
‖ second) in nats, the worst tokens ringed and labelled, the row titled with both models'
names and precisions. A fourth plot of the timeline, X-linked to the others, hidden unless
the selected reply has a comparison (:class:`app.model.model_compare.Comparison`); a click
on it selects the nearest token, as on the other plots."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyqtgraph as pg

from app.model.model_compare import Comparison
from app.model.textfmt import escape, visible
from app.views.timeline import TimelineWidget

KLD_ROW = 3  # below probability, entropy and a scored text's surprisal (row 2)
WORST_COLOR = "#d62728"
CURVE_COLOR = "#9467bd"


class KldRow:
    def __init__(self, timeline: TimelineWidget, on_select: Callable[[int], None]) -> None:
        self.timeline, self._on_select = timeline, on_select
        self.plot = timeline.add_row(KLD_ROW, "KLD (nats)")
        self.curve = self.plot.plot([], [], pen=pg.mkPen(CURVE_COLOR, width=1.5))
        self.points = pg.ScatterPlotItem(size=5, brush=pg.mkBrush(CURVE_COLOR), pen=None)
        self.worst = pg.ScatterPlotItem(size=13, brush=None, pen=pg.mkPen(WORST_COLOR, width=2))
        self.selection_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#e8710a", width=1))
        for item in (self.points, self.worst, self.selection_line):
            self.plot.addItem(item)
        self.labels: list[pg.TextItem] = []
        self.shown: Comparison | None = None
        self.worst_indices: list[int] = []
        timeline.view.scene().sigMouseClicked.connect(self._on_click)
        self.plot.hide()

    def show(self, comparison: Comparison | None, selected: int | None = None) -> None:
        """Draw ``comparison`` (None: hide the row) with token ``selected`` marked."""
        if comparison is None:
            self.plot.hide()
            self.shown = None
            return
        if comparison is not self.shown:
            self._draw(comparison)
        if selected is not None and comparison.row_at(selected) is not None:
            self.selection_line.setPos(selected)
            self.selection_line.show()
        else:
            self.selection_line.hide()
        self.plot.show()

    def _draw(self, comparison: Comparison) -> None:
        self.shown = comparison
        rows = comparison.rows
        x = np.fromiter((r.index for r in rows), float, len(rows))
        y = np.fromiter((r.kld for r in rows), float, len(rows))
        self.curve.setData(x, y)
        self.points.setData(x, y)
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

    def _on_click(self, event) -> None:
        if self.shown is None or not self.plot.isVisible():
            return
        if not self.plot.sceneBoundingRect().contains(event.scenePos()):
            return
        x = self.plot.vb.mapSceneToView(event.scenePos()).x()
        rows = self.shown.rows
        if rows:
            nearest = min(rows, key=lambda r: abs(r.index - x))
            self._on_select(nearest.index)
