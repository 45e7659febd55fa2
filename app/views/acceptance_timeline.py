"""The timeline's *draft acceptance* row (Models → Draft acceptance of every token): for a reply
written with a draft model, the running acceptance rate as a curve, and each token's outcome
as a mark — accepted at 1, drawn by the model after a rejection at 0, a bonus token ringed at
1. A :class:`app.views.series_row.SeriesRow` of :class:`app.model.draft.ReplyAcceptance`."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.model.draft import ReplyAcceptance
from app.views.series_row import SeriesRow
from engine.api.draft import Outcome

ACCEPTANCE_ROW = 6  # below the surprise row (5)
RATE_COLOR = "#5f6368"
OUTCOME_COLORS = {Outcome.ACCEPTED: "#188038", Outcome.REJECTED: "#d93025", Outcome.BONUS: "#1a73e8"}


class AcceptanceRow(SeriesRow):
    ROW, LABEL, SHORTER, COLOR = ACCEPTANCE_ROW, "draft acceptance", ("acceptance", "acc."), RATE_COLOR
    VALUE = "rate"
    POINT_SIZE = 0

    def add_items(self) -> None:
        self.marks = {
            outcome: pg.ScatterPlotItem(
                size=9,
                brush=None if outcome is Outcome.BONUS else pg.mkBrush(color),
                pen=pg.mkPen(color, width=1.5) if outcome is Outcome.BONUS else None,
            )
            for outcome, color in OUTCOME_COLORS.items()
        }
        for item in self.marks.values():
            self.plot.addItem(item)

    def wanted(self, result: ReplyAcceptance | None) -> bool:
        return result is not None and result.proposed > 0

    def decorate(self, result: ReplyAcceptance, x: np.ndarray, y: np.ndarray) -> None:
        for outcome, item in self.marks.items():
            at = [float(r.index) for r in result.rows if r.outcome is outcome]
            item.setData(at, [0.0 if outcome is Outcome.REJECTED else 1.0] * len(at))
        self.plot.setYRange(-0.1, 1.1, padding=0)
        cells = " · ".join(
            f"<span style='color:{color}'>{'○' if o is Outcome.BONUS else '●'}</span> {o.value}"
            for o, color in OUTCOME_COLORS.items()
        )
        self.plot.setTitle(f"<span style='font-size:9pt'>{result.summary()} · {cells} · — running rate</span>")
