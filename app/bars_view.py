"""Raw vs final: one token's candidates as bars, the bias and penalty effect, and the numbers.

Left: two bars per candidate (``raw`` probability in grey, after the last stage —
"final" — in colour), the chosen token outlined, tokens a stage removed shown with
their raw bar only and a greyed label. Right: the change of each candidate's logit
made by the bias and the penalties, and its count in the penalty window. Below: the
exact numbers, including the stage that removed a token.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.chain_view import LOG_FLOOR
from app.remote_labels import NOT_REPORTED, is_chosen, is_remote_step
from app.textfmt import percent, prob, visible
from app.theme import LIGHT, Colors
from engine.events import Candidate, TokenStep

COLUMNS = ["token", "id", "raw logit", "p raw", "p final", "removed by", "bias", "penalty", "count"]


class BarsView(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.log_scale = False
        self.step: TokenStep | None = None
        self.candidates: list[Candidate] = []
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground(self.colors.background)
        self.bars_plot = self.plots.addPlot(row=0, col=0)
        self.effect_plot = self.plots.addPlot(row=0, col=1)
        self.plots.ci.layout.setColumnStretchFactor(0, 3)
        self.plots.ci.layout.setColumnStretchFactor(1, 2)
        for plot in (self.bars_plot, self.effect_plot):
            plot.getAxis("bottom").enableAutoSIPrefix(False)
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.invertY(True)
        self.effect_plot.setYLink(self.bars_plot)
        # Items are made once and updated with setOpts/setData: rebuilding them costs
        # ~20 ms a redraw, which the GUI thread cannot spare while tokens stream in.
        self.raw_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.final_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.bias_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.penalty_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.zero_line = pg.InfiniteLine(pos=0, angle=90, pen=pg.mkPen(LIGHT.raw))
        for item in (self.raw_bars, self.final_bars):
            self.bars_plot.addItem(item)
        for item in (self.bias_bars, self.penalty_bars, self.zero_line):
            self.effect_plot.addItem(item)
        self.labels: list[pg.TextItem] = []
        self.effect_plot.getAxis("left").setStyle(showValues=False)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plots, 3)
        layout.addWidget(self.table, 2)

    def show_step(self, step: TokenStep | None, candidates: list[Candidate], colors: Colors, log_scale: bool) -> None:
        """``candidates``: the step's candidates in the order to draw them (raw rank)."""
        self.step, self.candidates, self.log_scale = step, candidates, log_scale
        if colors != self.colors:
            self.colors = colors
            self.plots.setBackground(colors.background)
        self._clear_labels()
        if step is None:
            self.table.setRowCount(0)
            for bars in (self.raw_bars, self.final_bars, self.bias_bars, self.penalty_bars):
                bars.setOpts(y=[], width=[])
            return
        self._draw_bars()
        self._draw_effects()
        self._fill_table()

    def row_at_scene(self, scene_pos: QPointF) -> int | None:
        for plot in (self.bars_plot, self.effect_plot):
            if plot.sceneBoundingRect().contains(scene_pos):
                row = int(round(plot.vb.mapSceneToView(scene_pos).y()))
                return row if 0 <= row < len(self.candidates) else None
        return None

    # Drawing ---------------------------------------------------------------------

    def _label(self, plot, text: str, color: str, x: float, y: float) -> None:
        item = pg.TextItem(text, color=color, anchor=(0, 0.5))
        item.setPos(x, y)
        plot.addItem(item)
        self.labels.append(item)

    def _clear_labels(self) -> None:
        for item in self.labels:
            view = item.getViewBox()
            if view is not None:
                view.removeItem(item)
        self.labels = []

    def _value(self, logprob: float) -> float:
        if self.log_scale:
            return (max(LOG_FLOOR, logprob / math.log(10)) - LOG_FLOOR) if math.isfinite(logprob) else 0.0
        return prob(logprob)

    def _draw_bars(self) -> None:
        c, cands, step = self.colors, self.candidates, self.step
        y = np.arange(len(cands), dtype=float)
        # A server reports one stage: "raw" is drawn only where that stage is raw.
        raw_known = step.stage_index("raw") is not None
        raw = [self._value(step.logprob_at("raw", cand)) if raw_known else 0.0 for cand in cands]
        final = [self._value(cand.logprob) for cand in cands]
        chosen_pen = pg.mkPen(c.chosen, width=2)
        none_pen = pg.mkPen(None)
        raw_brushes = [pg.mkBrush(c.raw) for _ in cands]
        final_brushes = [pg.mkBrush(c.chosen if is_chosen(step, cand) else c.final) for cand in cands]
        pens = [chosen_pen if is_chosen(step, cand) else none_pen for cand in cands]
        self.raw_bars.setOpts(y=y - 0.18, width=raw, brushes=raw_brushes, pens=pens)
        self.final_bars.setOpts(y=y + 0.18, width=final, brushes=final_brushes, pens=pens)
        ticks = []
        for i, cand in enumerate(cands):
            label = visible(cand.text)
            if not math.isfinite(cand.logprob):
                label += "  ✕"
            ticks.append((i, label))
        self.bars_plot.getAxis("left").setTicks([ticks])
        for i, cand in enumerate(cands):
            if not math.isfinite(cand.logprob):
                note = f"removed by {cand.removed_by}" if cand.removed_by else "removed"
                self._label(self.bars_plot, note, c.raw, max(raw[i], 0) + 0.01, i + 0.18)
        if self.log_scale:
            self.bars_plot.setLabel("bottom", f"log10 p (from {LOG_FLOOR:g})")
            span = -LOG_FLOOR
            self.bars_plot.getAxis("bottom").setTicks([[(v, f"{v + LOG_FLOOR:g}") for v in range(0, int(span) + 1)]])
            self.bars_plot.setXRange(0, span, padding=0.02)
        else:
            raw_words = "raw (grey)" if raw_known else f"raw: {NOT_REPORTED}"
            if is_remote_step(step):
                raw_words += f" · server reports {step.chain[-1]} only"
            self.bars_plot.setLabel("bottom", f"p: {raw_words} · final, after {step.chain[-1]} (colour)")
            self.bars_plot.getAxis("bottom").setTicks(None)
            self.bars_plot.setXRange(0, max([*raw, *final, 0.05]) * 1.1, padding=0)
        self.bars_plot.vb.disableAutoRange()
        self.bars_plot.setYRange(-0.6, max(len(cands) - 0.4, 0.6), padding=0)

    def _draw_effects(self) -> None:
        c, cands = self.colors, self.candidates
        y = np.arange(len(cands), dtype=float)
        reported = not any(math.isnan(cand.bias) or math.isnan(cand.penalty) for cand in cands)
        bias = [cand.bias if reported else 0.0 for cand in cands]
        penalty = [cand.penalty if reported else 0.0 for cand in cands]
        self.bias_bars.setOpts(y=y - 0.18, width=bias, brush=pg.mkBrush(c.bias))
        self.penalty_bars.setOpts(y=y + 0.18, width=penalty, brush=pg.mkBrush(c.penalty))
        self.zero_line.setPen(pg.mkPen(c.raw))
        for i, cand in enumerate(cands):
            if cand.count > 0:
                self._label(self.effect_plot, f"×{cand.count}", c.foreground, 0, i)
        if not reported:
            self._label(self.effect_plot, f"bias, penalty, count: {NOT_REPORTED}", c.raw, -0.5, 0)
        extent = max([abs(v) for v in bias + penalty] + [0.5])
        self.effect_plot.vb.disableAutoRange()
        self.effect_plot.setXRange(-extent * 1.1, extent * 1.1, padding=0)
        self.effect_plot.setLabel(
            "bottom", "Δ logit: bias · penalty · ×count" if reported else f"Δ logit: {NOT_REPORTED} by the server"
        )

    def _fill_table(self) -> None:
        step = self.step
        self.table.setRowCount(len(self.candidates))
        for row, cand in enumerate(self.candidates):
            raw_lp = step.logprob_at("raw", cand)
            values = [
                visible(cand.text),
                str(cand.token_id) if cand.token_id >= 0 else NOT_REPORTED,
                NOT_REPORTED if math.isnan(cand.raw_logit) else f"{cand.raw_logit:.3f}",
                NOT_REPORTED if raw_lp is None or math.isnan(raw_lp) else percent(raw_lp),
                NOT_REPORTED if math.isnan(cand.logprob) else percent(cand.logprob),
                cand.removed_by or "",
                _effect(cand.bias, "{:+.2f}"),
                _effect(cand.penalty, "{:+.3f}"),
                NOT_REPORTED if cand.count < 0 else (str(cand.count) if cand.count else ""),
            ]
            chosen = is_chosen(step, cand)
            color = QColor(self.colors.raw if not math.isfinite(cand.logprob) else self.colors.foreground)
            for col, value in enumerate(values):
                item = self.table.item(row, col)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(row, col, item)
                item.setText(value)
                font = item.font()
                font.setBold(chosen)
                item.setFont(font)
                item.setForeground(color)


def _effect(value: float, fmt: str) -> str:
    if math.isnan(value):
        return NOT_REPORTED
    return fmt.format(value) if value else ""
