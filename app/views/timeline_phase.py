"""The timeline's marks of a reasoning reply: the thinking's span shaded, a line
labelled "answer" before the first answer token, and the answer's first tokens drawn
larger in both plots, where the model decided (their legend in the timeline's toolbar)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel

from app.model.thinking import FIRST_ANSWER_TOKENS, first_answer
from app.views.theme import Colors
from engine.api.events import TokenStep
from engine.api.reasoning import THINKING


class PhaseMarks:
    """Owned by :class:`app.views.timeline.TimelineWidget`: drawn over its two plots."""

    def __init__(self, prob_plot: pg.PlotItem, entropy_plot: pg.PlotItem) -> None:
        self.plots = (prob_plot, entropy_plot)
        self.spans = [pg.LinearRegionItem(movable=False) for _ in self.plots]
        self.answer_line = pg.InfiniteLine(angle=90, movable=False, label="answer", labelOpts={"position": 0.75})
        self.first_points = [pg.ScatterPlotItem(size=12, symbol="o") for _ in self.plots]
        for plot, span, points in zip(self.plots, self.spans, self.first_points, strict=True):
            span.setZValue(-10)  # under the curves
            plot.addItem(span)
            plot.addItem(points)
        prob_plot.addItem(self.answer_line)
        self.legend = QLabel()
        self.legend.setToolTip(
            f"A reasoning reply: the thinking is shaded; the line marks the first answer token, "
            f"and the answer's first {FIRST_ANSWER_TOKENS} tokens are drawn larger."
        )
        self.end: int | None = None
        """Where the answer starts (a position in the steps drawn), or None."""
        self.thinking = False
        self._steps: list[TokenStep] | None = None
        self._scanned = 0
        self._end: int | None = None
        self.hide()

    def set_colors(self, colors: Colors) -> None:
        shade = pg.mkBrush(colors.raw)
        shade.setStyle(pg.QtCore.Qt.BrushStyle.SolidPattern)
        color = shade.color()
        color.setAlpha(40)
        for span in self.spans:
            span.setBrush(pg.mkBrush(color))
            for line in span.lines:
                line.setPen(pg.mkPen(None))
        self.answer_line.setPen(pg.mkPen(colors.foreground, width=1.5))  # the selection's line is orange
        self.answer_line.label.setColor(colors.foreground)
        for points in self.first_points:
            points.setBrush(pg.mkBrush(colors.chosen))
            points.setPen(pg.mkPen(colors.foreground, width=1))
        self.legend.setText(
            f"<span style='color:{colors.chosen}'>●</span> answer's first {FIRST_ANSWER_TOKENS} tokens"
            f" &nbsp;<span style='background-color:{color.name()}'>&nbsp;&nbsp;&nbsp;</span> thinking"
        )

    def hide(self) -> None:
        for item in (*self.spans, *self.first_points, self.answer_line, self.legend):
            item.setVisible(False)

    def _first_answer(self, steps: list[TokenStep]) -> int | None:
        """``first_answer(steps)``, scanning only the steps added since the last call for the
        same reply (it is called at every redraw while a reply streams)."""
        if steps is not self._steps:
            self._steps, self._scanned, self._end = steps, 0, None
        if self._end is None:
            found = first_answer(steps[max(0, self._scanned - 1) :])
            self._end = None if found is None else found + max(0, self._scanned - 1)
            self._scanned = len(steps)
        return self._end

    def update(self, steps: list[TokenStep], x: np.ndarray, p: np.ndarray, h: np.ndarray) -> None:
        """Place the marks for ``steps`` (drawn at ``x``, with probabilities ``p`` and
        entropies ``h``); hidden for a reply without thinking."""
        if not steps or steps[0].phase != THINKING or len(x) != len(steps):
            self.end, self.thinking = None, False
            self.hide()
            return
        end = self._first_answer(steps)
        self.end, self.thinking = end, True
        last = x[end] if end is not None else x[-1] + 1
        for span in self.spans:
            span.setRegion((x[0] - 0.5, last - 0.5))
            span.setVisible(True)
        self.answer_line.setVisible(end is not None)
        self.legend.setVisible(end is not None)
        first = slice(end, end + FIRST_ANSWER_TOKENS) if end is not None else slice(0, 0)
        for points, y in zip(self.first_points, (p, h), strict=True):
            xs, ys = x[first], y[first]
            keep = np.isfinite(ys)
            points.setData(x=xs[keep], y=ys[keep])
            points.setVisible(end is not None)
        if end is not None:
            self.answer_line.setPos(x[end] - 0.5)
