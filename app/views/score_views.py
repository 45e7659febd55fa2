"""What Score text and Replay show: the Score text dialog, and the timeline's overlays — a
replay's chosen-token probability (dashed red), the positions it would have removed it (✕ at
0) and where its most likely token differs (▲ at the top), and a scored text's surprisal in
a third timeline row. The data comes from :class:`app.model.scoring.Scoring`; the shell's
``ScoreController`` decides when to show it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
)

from app.model.replay import Replay
from app.views.file_dialogs import TEXTS, Folders
from app.views.timeline import TimelineWidget
from engine.api.events import TokenStep


class ScoreTextDialog(QDialog):
    def __init__(self, parent=None, folders: Folders | None = None) -> None:
        super().__init__(parent)
        self.folders = folders or Folders(None)  # where Open .txt / .md… opens
        self.setWindowTitle("Score text")
        self.resize(640, 420)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("The text to score (every token's probability as the model sees it):"))
        self.text = QPlainTextEdit()
        layout.addWidget(self.text)
        row = QHBoxLayout()
        self.open_button = QPushButton("Open .txt / .md…")
        self.open_button.clicked.connect(self.open_file)
        row.addWidget(self.open_button)
        row.addWidget(QLabel("As the reply to:"))
        self.prompt = QLineEdit()
        self.prompt.setPlaceholderText("(optional) a user message: score the text as the assistant's answer")
        row.addWidget(self.prompt, 1)
        layout.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Score")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def open_file(self) -> None:
        path = self.folders.open_file(self, TEXTS, "Open a text", "Text (*.txt *.md);;All files (*)")
        if path:
            self.load(path)

    def load(self, path: str | Path) -> None:
        self.text.setPlainText(Path(path).read_text(encoding="utf-8", errors="replace"))


REPLAY_RED, REPLAY_ORANGE, REPLAY_PINK = "#d62728", "#ff7f0e", "#e8a0a0"
REPLAY_LEGEND = (
    f"Replay: <span style='color:{REPLAY_RED}'>╌╌</span> p under the current settings (red dashes)"
    f" · <span style='color:{REPLAY_RED}'>✕</span> they would remove the token"
    f" · <span style='color:{REPLAY_PINK}'>✕</span> removed under the reply's own settings too"
    f" · <span style='color:{REPLAY_ORANGE}'>▲</span> their most likely token differs"
)
REPLAY_TIP = (
    "The reply's own tokens re-scored under the current settings (Chat → Replay): the red dashed"
    " curve is each token's probability after their last stage, ✕ at 0 marks a token they would"
    " have removed (pale where the reply's own settings removed it too: a scored text's given"
    " token, no change), ▲ at the top a position where their most likely token is not the one the"
    " reply's own settings made most likely."
)


class ReplayOverlay:
    """A replay over the timeline's probability plot, with a legend above the plots that
    names its marks and says what the replay found."""

    def __init__(self, timeline: TimelineWidget) -> None:
        self.prob = pg.PlotDataItem([], [], pen=pg.mkPen(REPLAY_RED, width=1.5, style=Qt.PenStyle.DashLine))
        self.removed = pg.ScatterPlotItem([], [], symbol="x", size=11, pen=pg.mkPen(REPLAY_RED, width=2))
        self.removed_too = pg.ScatterPlotItem([], [], symbol="x", size=9, pen=pg.mkPen(REPLAY_PINK, width=1.5))
        self.differs = pg.ScatterPlotItem([], [], symbol="t1", size=10, brush=pg.mkBrush(REPLAY_ORANGE))
        for item in (self.prob, self.removed_too, self.removed, self.differs):
            timeline.prob_plot.addItem(item)
        # On the timeline's toolbar, above the plots: one line where there is room, wrapped
        # (never widening the timeline) where there is not.
        self.legend = QLabel(REPLAY_LEGEND)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.legend.hide()
        bar = timeline.toolbar.layout()
        bar.insertWidget(bar.count() - 1, self.legend, 100)  # the room the stretch after it had

    def show(self, r: Replay, found: str = "") -> None:
        """Draw the replay ``r``; ``found``: what it found, in words (the legend's tooltip)."""
        x = np.array([s.index for s in r.steps], float)
        self.prob.setData(x, np.array(r.chosen_prob, float))
        self.removed.setData(np.array(r.removed, float), np.zeros(len(r.removed)))
        self.removed_too.setData(np.array(r.removed_too, float), np.zeros(len(r.removed_too)))
        self.differs.setData(np.array(r.differs, float), np.full(len(r.differs), 1.02))
        self.legend.setToolTip(f"{found}\n\n{REPLAY_TIP}" if found else REPLAY_TIP)
        self.legend.show()

    def clear(self) -> None:
        for item in (self.prob, self.removed, self.removed_too, self.differs):
            item.setData([], [])
        self.legend.hide()


class SurprisalRow:
    """A scored text's surprisal (bits, -log2 p under ``raw``), in a third row of the timeline,
    X-linked to the others; hidden unless a scored text is shown."""

    def __init__(self, timeline: TimelineWidget) -> None:
        self.plot = timeline.add_row(2, "surprisal (bits)", shorter=("surprisal", "bits"))
        self.curve = self.plot.plot([], [], pen=pg.mkPen("#9467bd", width=1.5))
        self.plot.hide()
        self._drawn: tuple | None = None

    def show(self, steps: list[TokenStep] | None) -> None:
        if not steps:
            self.plot.hide()
            self._drawn = None
            return
        key = (id(steps), len(steps))
        if key == self._drawn:
            return
        self._drawn = key
        x = np.fromiter((s.index for s in steps), float, len(steps))
        bits = np.fromiter((-s.logprobs[0] / math.log(2) for s in steps), float, len(steps))
        self.curve.setData(x, bits)
        self.plot.show()
