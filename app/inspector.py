"""The inspector: one token's candidates in ``raw`` and ``final``, and the penalty effect.

Left: horizontal bars, two per candidate (``raw`` probability in grey,
``final`` in colour), the chosen token highlighted, tokens truncated away
shown with their raw bar only and a greyed label. Right: for each candidate
the change of its logit made by bias and penalties, and its count in the
penalty window. Below: the exact numbers. Double-click (or the context menu)
continues the reply from another candidate.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.textfmt import escape, percent, prob, visible
from app.theme import LIGHT, Colors
from engine.events import Candidate, TokenStep

LOG_FLOOR = -6.0  # log10 p shown down to 1e-6
COLUMNS = [
    "token",
    "id",
    "raw logit",
    "p raw",
    "p penalized",
    "p final",
    "bias",
    "penalty",
    "count",
]


class InspectorWidget(QWidget):
    token_picked = Signal(int)  # continue the reply with this token id
    token_banned = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.step: TokenStep | None = None
        self.candidates: list[Candidate] = []
        self.title = QLabel("Send a message: the latest token's candidates show here.")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.log_scale = QCheckBox("log scale")
        self.log_scale.toggled.connect(self._redraw)
        header = QHBoxLayout()
        header.addWidget(self.title, 1)
        header.addWidget(self.log_scale)

        self.plots = pg.GraphicsLayoutWidget()
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
        self.plots.scene().sigMouseClicked.connect(self._on_plot_click)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.cellDoubleClicked.connect(lambda row, _: self._pick_row(row))
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._on_table_menu)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.plots, 3)
        layout.addWidget(self.table, 2)

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self.plots.setBackground(colors.background)
        self._redraw()

    def show_step(self, step: TokenStep | None) -> None:
        self.step = step
        self._redraw()

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

    def _redraw(self) -> None:
        step = self.step
        self._clear_labels()
        if step is None:
            self.candidates = []
            self.table.setRowCount(0)
            for bars in (self.raw_bars, self.final_bars, self.bias_bars, self.penalty_bars):
                bars.setOpts(y=[], width=[])
            return
        self.candidates = sorted(step.top, key=lambda c: (-c.raw_logit, c.token_id))
        self._draw_bars()
        self._draw_effects()
        self._fill_table()
        self.title.setText(self._title_html(step))

    def _title_html(self, step: TokenStep) -> str:
        picked = " · picked by hand" if step.forced else ""
        return (
            f"<b>Token {step.index}</b> &nbsp;<code>{escape(visible(step.piece))}</code>"
            f" &nbsp; p(final) {percent(step.logprob)} · p(raw) {percent(step.raw_logprob)}"
            f" · entropy raw {step.entropy_raw:.2f} / final {step.entropy:.2f} nats{picked}"
        )

    def _value(self, logprob: float) -> float:
        if self.log_scale.isChecked():
            return (max(LOG_FLOOR, logprob / math.log(10)) - LOG_FLOOR) if math.isfinite(logprob) else 0.0
        return prob(logprob)

    def _draw_bars(self) -> None:
        c, cands, step = self.colors, self.candidates, self.step
        y = np.arange(len(cands), dtype=float)
        raw = [self._value(cand.raw_logprob) for cand in cands]
        final = [self._value(cand.logprob) for cand in cands]
        chosen_pen = pg.mkPen(c.chosen, width=2)
        none_pen = pg.mkPen(None)
        raw_brushes = [pg.mkBrush(c.raw) for _ in cands]
        final_brushes = [pg.mkBrush(c.chosen if cand.token_id == step.token_id else c.final) for cand in cands]
        pens = [chosen_pen if cand.token_id == step.token_id else none_pen for cand in cands]
        self.raw_bars.setOpts(y=y - 0.18, width=raw, brushes=raw_brushes, pens=pens)
        self.final_bars.setOpts(y=y + 0.18, width=final, brushes=final_brushes, pens=pens)
        ticks = []
        for i, cand in enumerate(cands):
            label = visible(cand.text)
            if not math.isfinite(cand.logprob):
                label += "  ✕"
            ticks.append((i, label))
        axis = self.bars_plot.getAxis("left")
        axis.setTicks([ticks])
        for i, cand in enumerate(cands):
            if not math.isfinite(cand.logprob):
                self._label(self.bars_plot, "removed", c.raw, max(raw[i], 0) + 0.01, i + 0.18)
        if self.log_scale.isChecked():
            self.bars_plot.setLabel("bottom", f"log10 p (from {LOG_FLOOR:g})")
            span = -LOG_FLOOR
            self.bars_plot.getAxis("bottom").setTicks([[(v, f"{v + LOG_FLOOR:g}") for v in range(0, int(span) + 1)]])
            self.bars_plot.setXRange(0, span, padding=0.02)
        else:
            self.bars_plot.setLabel("bottom", "p: raw (grey) · final (colour)")
            self.bars_plot.getAxis("bottom").setTicks(None)
            self.bars_plot.setXRange(0, max([*raw, *final, 0.05]) * 1.1, padding=0)
        self.bars_plot.vb.disableAutoRange()
        self.bars_plot.setYRange(-0.6, max(len(cands) - 0.4, 0.6), padding=0)

    def _draw_effects(self) -> None:
        c, cands = self.colors, self.candidates
        y = np.arange(len(cands), dtype=float)
        bias = [cand.bias for cand in cands]
        penalty = [cand.penalty for cand in cands]
        self.bias_bars.setOpts(y=y - 0.18, width=bias, brush=pg.mkBrush(c.bias))
        self.penalty_bars.setOpts(y=y + 0.18, width=penalty, brush=pg.mkBrush(c.penalty))
        self.zero_line.setPen(pg.mkPen(c.raw))
        for i, cand in enumerate(cands):
            if cand.count:
                self._label(self.effect_plot, f"×{cand.count}", c.foreground, 0, i)
        extent = max([abs(v) for v in bias + penalty] + [0.5])
        self.effect_plot.vb.disableAutoRange()
        self.effect_plot.setXRange(-extent * 1.1, extent * 1.1, padding=0)
        self.effect_plot.setLabel("bottom", "Δ logit: bias · penalty · ×count")

    def _fill_table(self) -> None:
        step = self.step
        self.table.setRowCount(len(self.candidates))
        for row, cand in enumerate(self.candidates):
            values = [
                visible(cand.text),
                str(cand.token_id),
                f"{cand.raw_logit:.3f}",
                percent(cand.raw_logprob),
                percent(cand.penalized_logprob),
                percent(cand.logprob),
                f"{cand.bias:+.2f}" if cand.bias else "",
                f"{cand.penalty:+.3f}" if cand.penalty else "",
                str(cand.count) if cand.count else "",
            ]
            chosen = cand.token_id == step.token_id
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

    # Picking -----------------------------------------------------------------------

    def _row_at_scene(self, scene_pos) -> int | None:
        for plot in (self.bars_plot, self.effect_plot):
            if plot.sceneBoundingRect().contains(scene_pos):
                y = plot.vb.mapSceneToView(scene_pos).y()
                row = int(round(y))
                return row if 0 <= row < len(self.candidates) else None
        return None

    def _on_plot_click(self, event) -> None:
        row = self._row_at_scene(event.scenePos())
        if row is None:
            return
        self.table.selectRow(row)
        if event.double():
            self._pick_row(row)

    def _pick_row(self, row: int) -> None:
        if 0 <= row < len(self.candidates):
            self.token_picked.emit(self.candidates[row].token_id)

    def _on_table_menu(self, pos) -> None:
        row = self.table.rowAt(pos.y())
        if row < 0:
            return
        cand = self.candidates[row]
        menu = QMenu(self)
        pick = QAction(f"Continue with “{visible(cand.text)}”", menu)
        pick.triggered.connect(lambda: self.token_picked.emit(cand.token_id))
        ban = QAction(f"Ban “{visible(cand.text)}” (logit bias −100)", menu)
        ban.triggered.connect(lambda: self.token_banned.emit(cand.token_id))
        menu.addAction(pick)
        menu.addAction(ban)
        menu.exec(self.table.viewport().mapToGlobal(pos))
