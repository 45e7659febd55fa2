"""The inspector's *Draft* tab: what a draft model proposed at the selected token, beside what
the running model drew (``app.model.draft``).

A line says the outcome (accepted, rejected — the model drew another token —, bonus), the
token's place in its block, both draws and how they were made (greedy, or the same random
noise: the proposal is kept only when they agree), q (the proposal's probability under the
draft) and p (under the model), and, labelled as such, classic speculative sampling's
min(1, p/q). The table lists both models' candidates side by side, the most likely under
either first: q, p and that classic figure for each, the draft's proposal and the model's
draw marked. The tab is shown only for a token that has a draft record.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.model.draft import DraftRow, draft_header, draft_rows, fraction
from app.model.textfmt import percent, visible
from app.views.theme import LIGHT, Colors
from engine.api.events import TokenStep

COLUMNS = ("", "token", "q (draft)", "p (model)", "classic min(1, p/q)")
PROPOSED, DRAWN = "◆", "●"
LEGEND = f"{PROPOSED} the draft's proposal · {DRAWN} the model's draw"


class DraftView(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.header = QLabel("")
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.legend = QLabel(LEGEND)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        for column in (0, 2, 3, 4):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.legend)
        self.rows: list[DraftRow] = []

    def show_step(self, step: TokenStep | None, colors: Colors = LIGHT) -> None:
        self.rows = draft_rows(step) if step is not None else []
        self.header.setText(draft_header(step) if step is not None else "")
        self.legend.setStyleSheet(f"color: {colors.muted}")
        self.table.setRowCount(len(self.rows))
        for i, row in enumerate(self.rows):
            mark = (PROPOSED if row.proposed else "") + (DRAWN if row.drawn else "")
            cells = (
                mark,
                visible(row.text),
                _percent(row.q),
                _percent(row.p),
                fraction(row.classic_accept_probability),
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column >= 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if row.proposed or row.drawn:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                if row.proposed and not row.drawn:
                    item.setForeground(QBrush(QColor(colors.penalty)))
                self.table.setItem(i, column, item)


def _percent(p: float | None) -> str:
    """A probability as the inspector writes one (``percent``); "—" where it is not known."""
    return "—" if p is None else percent(math.log(p) if p > 0 else -math.inf)
