"""The inspector: the selected token, what every stage of the chain did to its candidates.

Two tabs over the same candidates in the same order (their ``raw`` rank):
*Chain* (``app.chain_view``), every candidate's probability after every stage that
ran, and *Raw vs final* (``app.bars_view``), bars for ``raw`` and for the last stage
with the bias and penalty effect and the numbers. Double-click a candidate in
either (or use its context menu) to continue the reply from it.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QModelIndex, QPoint, Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.bars_view import BarsView
from app.chain_view import ChainView, raw_rank
from app.textfmt import escape, percent, visible
from app.theme import LIGHT, Colors
from engine.events import Candidate, TokenStep

CHAIN_TAB, BARS_TAB = 0, 1


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

        self.chain_view = ChainView()
        self.bars = BarsView()
        self.table = self.bars.table
        self.tabs = QTabWidget()
        self.tabs.addTab(self.chain_view, "Chain")
        self.tabs.addTab(self.bars, "Raw vs final")
        self.tabs.currentChanged.connect(lambda _: self._redraw())
        for view in (self.chain_view, self.table):
            view.doubleClicked.connect(lambda index: self._pick_row(index.row()))
            view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            view.customContextMenuRequested.connect(lambda pos, v=view: self._on_menu(v, pos))
        self.bars.plots.scene().sigMouseClicked.connect(self._on_plot_click)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(self.tabs, 1)

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self._redraw()

    def show_step(self, step: TokenStep | None) -> None:
        self.step = step
        self._redraw()

    def _redraw(self) -> None:
        step = self.step
        self.candidates = raw_rank(step) if step is not None else []
        log = self.log_scale.isChecked()
        # Only the tab in view is drawn: the other is brought up to date when it is shown.
        if self.tabs.currentIndex() == CHAIN_TAB:
            self.chain_view.show_step(step, self.colors, log)
        else:
            self.bars.show_step(step, self.candidates, self.colors, log)
        if step is not None:
            self.title.setText(self._title_html(step))

    def _title_html(self, step: TokenStep) -> str:
        picked = " · picked by hand" if step.forced else ""
        if step.params.greedy and not step.forced:
            # The stages after temperature were computed at T = 1 for inspection only.
            picked = " · greedy: the most likely token entering temperature"
        last = step.chain[-1]
        return (
            f"<b>Token {step.index}</b> &nbsp;<code>{escape(visible(step.piece))}</code>"
            f" &nbsp; p after {last} {percent(step.logprob)} · raw {percent(step.raw_logprob)}"
            f" · entropy raw {_nats(step.entropy_raw)} → {last} {_nats(step.entropy)}{picked}"
        )

    # Picking -----------------------------------------------------------------------

    def _on_plot_click(self, event) -> None:
        row = self.bars.row_at_scene(event.scenePos())
        if row is None:
            return
        self.table.selectRow(row)
        if event.double():
            self._pick_row(row)

    def _pick_row(self, row: int) -> None:
        if 0 <= row < len(self.candidates):
            self.token_picked.emit(self.candidates[row].token_id)

    def _on_menu(self, view: QAbstractItemView, pos: QPoint) -> None:
        index: QModelIndex = view.indexAt(pos)
        if not index.isValid() or index.row() >= len(self.candidates):
            return
        cand = self.candidates[index.row()]
        menu = QMenu(self)
        pick = QAction(f"Continue with “{visible(cand.text)}”", menu)
        pick.triggered.connect(lambda: self.token_picked.emit(cand.token_id))
        ban = QAction(f"Ban “{visible(cand.text)}” (logit bias −100)", menu)
        ban.triggered.connect(lambda: self.token_banned.emit(cand.token_id))
        menu.addAction(pick)
        menu.addAction(ban)
        menu.exec(view.viewport().mapToGlobal(pos))


def _nats(h: float) -> str:
    return "?" if math.isnan(h) else f"{h:.2f}"
