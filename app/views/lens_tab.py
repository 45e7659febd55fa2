"""The inspector's *Layers* tab (the logit lens): what each layer of the running model would
have predicted at the selected token.

A header — the token, and the layer it was decided at ("decided at layer 17 of 30", or that
it never was the most likely token), and which other tokens led on the way — over the heat
map (``app.views.lens_heatmap``: layers × candidates) and a small plot of each layer's
entropy and KL(final ‖ layer) in nats, the decided layer marked. While the worker reads the
token: a progress bar and *Cancel*; where it cannot be read (no model, a server, a reply
still being written, an error), the reason in words instead. The shell
(``app.shell.controllers.logit_lens``) decides which of these to show; this widget only draws them.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.model.lens_grid import LensGrid, decided_words, lens_grid, other_tops_words
from app.model.logit_lens import ReplyLens
from app.model.textfmt import escape, visible
from app.views.lens_heatmap import DIFFERS, LensHeatmap
from app.views.theme import LIGHT, Colors

PLOT_HEIGHT = 130
LEGEND = "Cell: the token's probability at that layer · framed: the chosen token · dashed line: where it was decided"
HATCHED = " · hatched: not among that layer's most likely tokens (below the last of them)"
"""Only rows read before each layer carried the final candidates' numbers have such cells."""
KL_COLOR = "#9467bd"  # Compare models' KLD row uses it: a divergence, in both places
ERROR_COLOR = "#d93025"


class LayersView(QWidget):
    cancel_requested = Signal()
    retry_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.grid: LensGrid | None = None
        self.state: tuple = ()  # what is shown, so repeated calls with the same content cost nothing
        self._error = False  # the message shown is a failure (red)
        self.header = QLabel()
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setWordWrap(True)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setContentsMargins(16, 16, 16, 16)
        self.retry_button = QPushButton("Read the layers again")
        self.retry_button.clicked.connect(self.retry_requested)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.busy = QWidget()
        busy = QHBoxLayout(self.busy)
        busy.setContentsMargins(0, 0, 0, 0)
        busy.addWidget(self.progress, 1)
        busy.addWidget(self.cancel_button)
        self.heatmap = LensHeatmap()
        # Entropy and KL side by side, each on its own scale: the embedding layer's KL (often
        # ten times the others') would flatten every other layer on a shared axis.
        self.entropy_plot, self.entropy_curve, self.entropy_line = _layer_plot("entropy (nats)")
        self.kl_plot, self.kl_curve, self.kl_line = _layer_plot("KL(final ‖ layer) (nats)")
        self.plots = QWidget()
        plots = QHBoxLayout(self.plots)
        plots.setContentsMargins(0, 0, 0, 0)
        plots.addWidget(self.entropy_plot)
        plots.addWidget(self.kl_plot)
        self.legend = QLabel(LEGEND)
        self.legend.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addWidget(self.header)
        layout.addWidget(self.busy)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.retry_button, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addWidget(self.heatmap, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.plots)
        layout.addStretch(0)  # what a short heat map leaves, below the plot rather than inside it
        self.set_colors(LIGHT)
        self.show_message("")

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        for plot, curve, line, color in (
            (self.entropy_plot, self.entropy_curve, self.entropy_line, colors.final),
            (self.kl_plot, self.kl_curve, self.kl_line, KL_COLOR),
        ):
            plot.setBackground(colors.background)
            curve.setPen(pg.mkPen(color, width=1.5))
            curve.setSymbolBrush(pg.mkBrush(color))
            curve.setSymbolPen(None)
            line.setPen(pg.mkPen(colors.chosen, width=1.5, style=Qt.PenStyle.DashLine))
        self.legend.setStyleSheet(f"color: {colors.muted}")
        self.message.setStyleSheet(f"color: {ERROR_COLOR if self._error else colors.muted}")
        self.heatmap.set_grid(self.heatmap.grid, colors)

    def _show(self, header: bool, busy: bool, message: bool, result: bool, retry: bool = False) -> None:
        self.header.setVisible(header)
        self.busy.setVisible(busy)
        self.message.setVisible(message)
        self.retry_button.setVisible(retry)
        for widget in (self.heatmap, self.legend, self.plots):
            widget.setVisible(result)

    def show_message(self, text: str, error: bool = False, retry: bool = False) -> None:
        """Why nothing is shown (no model, a server's reason, no token selected, a failure)."""
        state = ("message", text, error, retry)
        if state == self.state:
            return
        self.state, self.grid = state, None
        self.message.setText(text)
        self._error = error
        self.message.setStyleSheet(f"color: {ERROR_COLOR if error else self.colors.muted}")
        self.heatmap.set_grid(None)
        self._show(False, False, True, False, retry)

    def show_busy(self, words: str, done: int, total: int) -> None:
        """The worker is reading: ``total`` 1 is one token (a busy bar), else ``done`` of ``total``."""
        state = ("busy", words, done, total)
        if state == self.state:
            return
        self.state, self.grid = state, None
        self.header.setText(words)
        if total <= 1:
            self.progress.setRange(0, 0)  # one forward pass and its read-out: no steps to count
        else:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
            self.progress.setFormat(f"{done}/{total} tokens")
        self.heatmap.set_grid(None)
        self._show(True, True, False, False)

    def show_position(self, lens: ReplyLens, row) -> None:
        """Position ``row`` (an ``engine.api.results.LensPosition``) of ``lens``'s reply."""
        state = ("result", id(lens), id(row), self.colors)
        if state == self.state:
            return
        self.state = state
        grid = self.grid = lens_grid(row, lens.piece)
        token = escape(visible(lens.piece(row.chosen)))
        decided = decided_words(grid)
        others = other_tops_words(grid)
        others = f"<br><span style='color:{DIFFERS}'>{escape(others)}</span>" if others else ""
        self.header.setText(f"<b>Token {row.position}</b> &nbsp;<code>{token}</code> &nbsp; {decided}{others}")
        self.heatmap.set_grid(grid, self.colors)
        self.legend.setText(LEGEND + (HATCHED if np.isnan(grid.probs).any() else ""))
        layers = list(range(grid.layers + 1))
        for plot, curve, line, values in (
            (self.entropy_plot, self.entropy_curve, self.entropy_line, grid.entropy),
            (self.kl_plot, self.kl_curve, self.kl_line, grid.kl_final),
        ):
            curve.setData(layers, values)
            line.setVisible(grid.decided_at is not None)
            line.setPos(grid.decided_at if grid.decided_at is not None else 0)
            plot.getPlotItem().setXRange(-0.5, grid.layers + 0.5, padding=0)
            axis = plot.getPlotItem().getAxis("bottom")
            if grid.layers < 10:  # whole layers only; pyqtgraph's own spacing is fine past ten
                axis.setTickSpacing(1, 1)
            else:
                axis.setTickSpacing()
            plot.getPlotItem().setYRange(0, max(1e-6, float(values.max())) * 1.08, padding=0)
        self._show(True, False, False, True)


def _layer_plot(title: str) -> tuple[pg.PlotWidget, pg.PlotDataItem, pg.InfiniteLine]:
    """A small plot of one number per layer, the decided layer marked by a dashed line."""
    plot = pg.PlotWidget()
    plot.setMinimumHeight(PLOT_HEIGHT // 2)
    plot.setMaximumHeight(PLOT_HEIGHT)
    item = plot.getPlotItem()
    item.setMenuEnabled(False)
    item.setMouseEnabled(x=False, y=False)
    item.hideButtons()
    item.showGrid(x=False, y=True, alpha=0.2)
    item.setTitle(f"<span style='font-size:9pt'>{title}</span>")
    item.setLabel("bottom", "layer")
    item.getAxis("left").enableAutoSIPrefix(False)
    curve = item.plot([], [], symbol="o", symbolSize=4)
    line = pg.InfiniteLine(angle=90, movable=False)
    item.addItem(line)
    return plot, curve, line
