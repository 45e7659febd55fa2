"""The timeline's compare run: a curve per column (each token's final probability) on the top
plot, below the Jensen–Shannon divergence of the columns per token (the mean over pairs),
the first token where two columns drew differently marked, and a click that picks the
nearest column's token. A mixin of :class:`app.views.timeline.TimelineWidget`, which
holds the plots and items drawn here."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg

from app.model.textfmt import prob
from app.model.timeline_series import nearest
from app.views.theme import variant_color
from engine.api.events import TokenStep

if TYPE_CHECKING:
    from app.views.timeline import TimelineWidget

MAX_RUN_DOTS = 300
"""A compare run's columns are drawn without a dot per token beyond this many tokens
(redrawn whole: each has its own curve)."""


class RunPlots:
    def set_run(
        self: TimelineWidget,
        columns: list[list[TokenStep]],
        labels: list[str],
        start: int,
        divergence: tuple[list[int], list[float]],
        first_difference: int | None,
        selected: tuple[int, int] | None,
    ) -> None:
        """Columns of a compare run from token ``start`` on; ``divergence``: (index, JS nats);
        ``selected``: (column, index)."""
        self.columns, self._run = columns, (labels, start, divergence, first_difference, selected)
        self._show_empty(False)
        if not self.run_mode:
            self._show_mode(True)
        self._redraw_run()

    def _redraw_run(self: TimelineWidget) -> None:
        labels, start, (dx, dy), first, selected = self._run
        while len(self.variant_curves) < len(self.columns):
            column = len(self.variant_curves)
            curve = self.prob_plot.plot(
                [], [], pen=pg.mkPen(variant_color(column, self.colors), width=1.5), antialias=self._antialias
            )
            curve.setSymbolSize(5)
            self.variant_curves.append(curve)
        for column, curve in enumerate(self.variant_curves):
            shown = column < len(self.columns)
            curve.setVisible(shown)
            if not shown:
                continue
            steps = self.columns[column][start:]
            color = variant_color(column, self.colors)
            curve.setSymbolBrush(pg.mkBrush(color))
            curve.setSymbolPen(None)
            x = np.array([s.index for s in steps], dtype=float)
            curve.setSymbol("o" if len(steps) <= MAX_RUN_DOTS else None)
            curve.setData(x, np.array([prob(s.logprob) for s in steps], dtype=float))
        self.divergence_curve.setData(np.array(dx, dtype=float), np.array(dy, dtype=float), connect="finite")
        self._set_x_range(np.array([s.index for c in self.columns for s in c[start:]] or dx, dtype=float))
        if first is not None:
            self.first_difference.setPos(first - 0.5)
            self.first_difference.label.setFormat(f"first different token: {first}")
        self.first_difference.setVisible(first is not None)
        dots = [f"<span style='color:{variant_color(i, self.colors)}'>●</span> {t}" for i, t in enumerate(labels)]
        self.legend.setText("  ".join(dots) + "  ·  below: Jensen–Shannon divergence of the columns (mean of pairs)")
        if selected is not None and selected[0] < len(self.columns):
            self._place_selection(self.columns[selected[0]], selected[1])
        else:
            self.selection_line.hide()

    def _select_in_run(self: TimelineWidget, x: float, y: float | None) -> None:
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
        if best is not None:
            self.column_token_selected.emit(best[1], best[2])
