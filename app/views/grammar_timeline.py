"""The timeline's *masked by grammar* row (Models → Mass masked by the grammar at every token):
for a reply written under a grammar (Structured output), the probability the grammar removed at
each token from the distribution entering it, the tokens where it overrode the model's first
choice ringed, the forced ones (one token allowed) as squares. A
:class:`app.views.series_row.SeriesRow` of :class:`app.model.grammar_masks.ReplyMasks`."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.model.grammar_masks import ReplyMasks
from app.views.series_row import SeriesRow

GRAMMAR_ROW = 7  # below the draft acceptance row (6)
MASS_COLOR = "#8e24aa"
OVERRIDE_COLOR = "#d93025"
FORCED_COLOR = "#5f6368"


class GrammarRow(SeriesRow):
    ROW, LABEL, SHORTER, COLOR = GRAMMAR_ROW, "masked by grammar", ("masked", "mask"), MASS_COLOR
    VALUE = "removed"
    POINT_SIZE = 4

    def add_items(self) -> None:
        self.overrides = pg.ScatterPlotItem(size=11, brush=None, pen=pg.mkPen(OVERRIDE_COLOR, width=1.5))
        self.forced = pg.ScatterPlotItem(size=8, symbol="s", brush=pg.mkBrush(FORCED_COLOR), pen=None)
        self.plot.addItem(self.forced)
        self.plot.addItem(self.overrides)

    def wanted(self, result: ReplyMasks | None) -> bool:
        return result is not None and result.constrained > 0

    def decorate(self, result: ReplyMasks, x: np.ndarray, y: np.ndarray) -> None:
        over = [r for r in result.rows if r.overridden]
        self.overrides.setData([float(r.index) for r in over], [r.removed for r in over])
        forced = [r for r in result.rows if r.forced]
        self.forced.setData([float(r.index) for r in forced], [r.removed for r in forced])
        self.plot.setYRange(-0.05, 1.05, padding=0)
        self.plot.setTitle(
            "<span style='font-size:9pt'>Probability the grammar removed at each token · "
            f"<span style='color:{OVERRIDE_COLOR}'>○</span> overrode the model's first choice · "
            f"<span style='color:{FORCED_COLOR}'>■</span> forced · {result.summary()}</span>"
        )
