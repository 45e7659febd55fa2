"""The timeline's compare run: a curve per column (each token's final probability) on the top
plot, below the Jensen–Shannon divergence of the columns per token (the mean over pairs),
the first token where two columns drew differently marked, and a click that picks the
nearest column's token. :class:`app.views.timeline.TimelineWidget` holds one
:class:`RunPlots` over its two plots and shows it in place of the single reply's items."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel

from app.model.textfmt import prob
from app.model.timeline_series import nearest
from app.views.theme import Colors, variant_color
from engine.api.events import TokenStep

MAX_RUN_DOTS = 300
"""A compare run's columns are drawn without a dot per token beyond this many tokens
(redrawn whole: each has its own curve)."""


class RunPlots:
    """The run's items on the timeline's probability and entropy plots, and its legend (a
    label the timeline places in its toolbar)."""

    def __init__(self, prob_plot: pg.PlotItem, entropy_plot: pg.PlotItem) -> None:
        self.prob_plot = prob_plot
        self.columns: list[list[TokenStep]] = []
        self._run: tuple = ([], 0, ([], []), None, None)
        self.variant_curves: list[pg.PlotDataItem] = []
        self.divergence_curve = entropy_plot.plot([], [])
        self.first_difference = pg.InfiniteLine(
            pos=-1, angle=90, movable=False, label="first different token", labelOpts={"position": 0.85}
        )
        entropy_plot.addItem(self.first_difference)
        self.legend = QLabel()

    def set(
        self,
        columns: list[list[TokenStep]],
        labels: list[str],
        start: int,
        divergence: tuple[list[int], list[float]],
        first_difference: int | None,
        selected: tuple[int, int] | None,
    ) -> None:
        """Columns of a compare run from token ``start`` on; ``divergence``: (index, JS nats);
        ``selected``: (column, index). Drawn by :meth:`redraw`."""
        self.columns, self._run = columns, (labels, start, divergence, first_difference, selected)

    def set_colors(self, colors: Colors) -> None:
        self.divergence_curve.setPen(pg.mkPen(colors.foreground, width=2))
        self.first_difference.setPen(pg.mkPen(colors.marker, width=1.5, style=pg.QtCore.Qt.PenStyle.DashLine))
        self.first_difference.label.setColor(colors.marker)
        for column, curve in enumerate(self.variant_curves):
            curve.setPen(pg.mkPen(variant_color(column, colors), width=1.5))

    def curves(self) -> list[pg.PlotDataItem]:
        """Every curve drawn (smoothed or not with the timeline's others)."""
        return [self.divergence_curve, *self.variant_curves]

    def show(self, shown: bool) -> None:
        for curve in self.variant_curves:
            curve.setVisible(shown)
        self.divergence_curve.setVisible(shown)
        self.first_difference.setVisible(shown and self.first_difference.value() >= 0)
        self.legend.setVisible(shown)

    def redraw(self, colors: Colors, antialias: bool) -> tuple[np.ndarray, tuple[list[TokenStep], int] | None]:
        """Draw the run; returns the token positions drawn (for the x range) and the selected
        token as (its column's steps, index), None when none is."""
        labels, start, (dx, dy), first, selected = self._run
        while len(self.variant_curves) < len(self.columns):
            column = len(self.variant_curves)
            curve = self.prob_plot.plot(
                [], [], pen=pg.mkPen(variant_color(column, colors), width=1.5), antialias=antialias
            )
            curve.setSymbolSize(5)
            self.variant_curves.append(curve)
        for column, curve in enumerate(self.variant_curves):
            shown = column < len(self.columns)
            curve.setVisible(shown)
            if not shown:
                continue
            steps = self.columns[column][start:]
            color = variant_color(column, colors)
            curve.setSymbolBrush(pg.mkBrush(color))
            curve.setSymbolPen(None)
            x = np.array([s.index for s in steps], dtype=float)
            curve.setSymbol("o" if len(steps) <= MAX_RUN_DOTS else None)
            curve.setData(x, np.array([prob(s.logprob) for s in steps], dtype=float))
        self.divergence_curve.setData(np.array(dx, dtype=float), np.array(dy, dtype=float), connect="finite")
        if first is not None:
            self.first_difference.setPos(first - 0.5)
            self.first_difference.label.setFormat(f"first different token: {first}")
        self.first_difference.setVisible(first is not None)
        dots = [f"<span style='color:{variant_color(i, colors)}'>●</span> {t}" for i, t in enumerate(labels)]
        self.legend.setText("  ".join(dots) + "  ·  below: Jensen–Shannon divergence of the columns (mean of pairs)")
        xs = np.array([s.index for c in self.columns for s in c[start:]] or dx, dtype=float)
        if selected is not None and selected[0] < len(self.columns):
            return xs, (self.columns[selected[0]], selected[1])
        return xs, None

    def pick(self, x: float, y: float | None) -> tuple[int, int] | None:
        """The (column, token index) nearest a click at ``x`` (and ``y`` on the top plot)."""
        best = None
        start = self._run[1]
        for column, steps in enumerate(self.columns):
            index = nearest(steps, max(x, start))
            if index is not None and index < start:
                index = None
            if index is None:
                continue
            distance = abs(prob(steps[index].logprob) - y) if y is not None else column
            if best is None or distance < best[0]:
                best = (distance, column, index)
        return (best[1], best[2]) if best is not None else None
