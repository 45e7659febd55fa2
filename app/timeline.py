"""The timeline: the whole reply at a glance.

Top: the chosen token's probability after the last stage, per position. Bottom:
the entropy after the stage picked above the plots (by default the last stage of
each token's chain; a token whose chain did not run that stage leaves a gap). Red
rings mark tokens that were not the raw argmax; dashed lines mark where the
sampling parameters changed (any value, or the order of the stages), labelled with
what changed. Clicking a point selects that token.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.textfmt import prob
from app.theme import LIGHT, Colors
from engine.events import TokenStep
from engine.params import STAGE_NAMES, SamplingParams

LAST_STAGE = "last stage"
"""The stage selector's default: each token's own last stage."""


def changed_params(steps: list[TokenStep]) -> list[int]:
    """Indices (into ``steps``) where the parameters differ from the token before."""
    return [i for i in range(1, len(steps)) if steps[i].params != steps[i - 1].params]


def params_diff(before: SamplingParams, after: SamplingParams) -> list[str]:
    """The names of the fields that differ (``samplers`` for a change of order)."""
    return [f.name for f in fields(SamplingParams) if getattr(before, f.name) != getattr(after, f.name)]


def change_label(before: SamplingParams, after: SamplingParams) -> str:
    names = params_diff(before, after)
    return ", ".join(names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else "")


def entropies_at(steps: list[TokenStep], stage: str) -> np.ndarray:
    """Each token's entropy after ``stage`` (NaN where it did not run); ``LAST_STAGE``: after its last."""
    values = []
    for step in steps:
        i = len(step.chain) - 1 if stage == LAST_STAGE else step.stage_index(stage)
        values.append(math.nan if i is None else step.entropies[i])
    return np.array(values, dtype=float)


def stages_in(steps: list[TokenStep]) -> list[str]:
    """The stages some token ran, in the canonical order of ``STAGE_NAMES``."""
    seen = {stage for step in steps for stage in step.chain}
    return [stage for stage in STAGE_NAMES if stage in seen]


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
        self.entropy_plot.setLabel("left", "H last stage")
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
        self.stage = QComboBox()
        self.stage.addItem(LAST_STAGE)
        self.stage.setToolTip("The stage whose entropy the lower plot shows")
        self.stage.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.stage.currentTextChanged.connect(lambda _: self.set_steps(self.steps, self.selected))
        bar = QHBoxLayout()
        bar.setContentsMargins(6, 0, 0, 0)
        bar.addWidget(QLabel("Entropy after"))
        bar.addWidget(self.stage)
        bar.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
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

    def _update_stage_choices(self, steps: list[TokenStep]) -> None:
        choices = [LAST_STAGE, *stages_in(steps)]
        current = self.stage.currentText()
        if [self.stage.itemText(i) for i in range(self.stage.count())] == choices:
            return
        self.stage.blockSignals(True)
        self.stage.clear()
        self.stage.addItems(choices)
        # A stage picked earlier stays picked while some reply still runs it.
        self.stage.setCurrentText(current if current in choices else LAST_STAGE)
        self.stage.blockSignals(False)

    def set_steps(self, steps: list[TokenStep], selected: int | None) -> None:
        self.steps, self.selected = steps, selected
        self._update_stage_choices(steps)
        stage = self.stage.currentText()
        x = np.array([s.index for s in steps], dtype=float)
        p = np.array([prob(s.logprob) for s in steps], dtype=float)
        h = entropies_at(steps, stage)
        ran = np.flatnonzero(np.isfinite(h))
        # NaN breaks the line: a gap where the stage did not run (or its entropy is unknown).
        self.prob_curve.setData(x, p)
        self.entropy_curve.setData(x, h, connect="finite")
        self.entropy_plot.setLabel("left", f"H {stage}")
        brush = pg.mkBrush(self.colors.final)
        self.prob_points.setData(x=x, y=p, data=list(range(len(steps))), brush=brush, pen=None)
        self.entropy_points.setData(
            x=x[ran], y=h[ran], data=[int(i) for i in ran], brush=pg.mkBrush(self.colors.raw), pen=None
        )
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
                label=change_label(steps[i - 1].params, steps[i].params),
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
