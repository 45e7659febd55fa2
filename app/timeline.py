"""The timeline: the whole reply at a glance.

Top: the chosen token's ``final`` probability per position. Bottom: the
entropy of ``raw``. Red rings mark tokens that were not the raw argmax;
dashed lines mark where the sampling parameters changed. Clicking a point
selects that token.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.textfmt import prob
from app.theme import LIGHT, Colors
from engine.events import TokenStep


def changed_params(steps: list[TokenStep]) -> list[int]:
    """Indices (into ``steps``) where the parameters differ from the token before."""
    return [i for i in range(1, len(steps)) if steps[i].params != steps[i - 1].params]


def not_argmax(steps: list[TokenStep]) -> list[int]:
    return [i for i, s in enumerate(steps) if not s.raw_argmax]


class TimelineWidget(QWidget):
    token_selected = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.steps: list[TokenStep] = []
        self.selected: int | None = None
        self.view = pg.GraphicsLayoutWidget()
        self.prob_plot = self.view.addPlot(row=0, col=0)
        self.entropy_plot = self.view.addPlot(row=1, col=0)
        self.entropy_plot.setXLink(self.prob_plot)
        self.prob_plot.setLabel("left", "p final")
        self.entropy_plot.setLabel("left", "H raw")
        self.entropy_plot.setLabel("bottom", "token")
        self.prob_plot.setYRange(0, 1.05, padding=0)
        for plot in (self.prob_plot, self.entropy_plot):
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(x=True, y=False)
            plot.showGrid(x=False, y=True, alpha=0.2)
        self.prob_curve = self.prob_plot.plot([], [])
        self.prob_points = pg.ScatterPlotItem(size=7)
        self.prob_points.sigClicked.connect(self._on_clicked)
        self.prob_plot.addItem(self.prob_points)
        self.argmax_marks = pg.ScatterPlotItem(size=13, brush=None)
        self.prob_plot.addItem(self.argmax_marks)
        self.entropy_curve = self.entropy_plot.plot([], [])
        self.entropy_points = pg.ScatterPlotItem(size=5)
        self.entropy_points.sigClicked.connect(self._on_clicked)
        self.entropy_plot.addItem(self.entropy_points)
        self.selection_line = pg.InfiniteLine(angle=90, movable=False)
        self.prob_plot.addItem(self.selection_line)
        self.change_lines: list[pg.InfiniteLine] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)
        self.set_colors(LIGHT)

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self.view.setBackground(colors.background)
        self.prob_curve.setPen(pg.mkPen(colors.final, width=1.5))
        self.entropy_curve.setPen(pg.mkPen(colors.raw, width=1.5))
        self.argmax_marks.setPen(pg.mkPen(colors.marker, width=2))
        self.selection_line.setPen(pg.mkPen(colors.chosen, width=1))
        self.set_steps(self.steps, self.selected)

    def set_steps(self, steps: list[TokenStep], selected: int | None) -> None:
        self.steps, self.selected = steps, selected
        x = np.array([s.index for s in steps], dtype=float)
        p = np.array([prob(s.logprob) for s in steps], dtype=float)
        h = np.array([s.entropy_raw if math.isfinite(s.entropy_raw) else 0.0 for s in steps])
        self.prob_curve.setData(x, p)
        self.entropy_curve.setData(x, h)
        brush = pg.mkBrush(self.colors.final)
        self.prob_points.setData(x=x, y=p, data=list(range(len(steps))), brush=brush, pen=None)
        self.entropy_points.setData(x=x, y=h, data=list(range(len(steps))), brush=pg.mkBrush(self.colors.raw), pen=None)
        marks = not_argmax(steps)
        self.argmax_marks.setData(x=x[marks], y=p[marks]) if marks else self.argmax_marks.clear()
        for line in self.change_lines:
            self.prob_plot.removeItem(line)
        self.change_lines = []
        for i in changed_params(steps):
            line = pg.InfiniteLine(
                pos=steps[i].index - 0.5,
                angle=90,
                pen=pg.mkPen(self.colors.bias, style=pg.QtCore.Qt.PenStyle.DashLine),
                label="params",
                labelOpts={"position": 0.95, "color": self.colors.bias},
            )
            self.prob_plot.addItem(line)
            self.change_lines.append(line)
        if selected is not None and 0 <= selected < len(steps):
            self.selection_line.setPos(steps[selected].index)
            self.selection_line.show()
        else:
            self.selection_line.hide()

    def _on_clicked(self, item, points, *args) -> None:
        if len(points):
            self.token_selected.emit(int(points[0].data()))
