"""The inspector's *Models* tab (Models → Compare models…): the selected token's two
distributions side by side — the running model's top tokens and the second model's, with
probabilities and logprobs — with the reply's token in bold on a tinted row, each token's
rank in the other list (a token the other model does not rank in its top list, or ranks
elsewhere, is marked), and above them the token's KL divergence and its probability under
each model."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.model.model_compare import Comparison, num
from app.model.textfmt import escape, percent, visible
from app.views.theme import LIGHT, Colors

COLUMNS = ("#", "token", "p", "logprob", "other #")
OTHER_TIP = "The token's rank in the other model's top list; — : not in it. Marked where the two lists disagree."
DIFFERS = QColor("#c26a00")  # readable on both themes' backgrounds
NOTHING = "Select a token of a compared reply (Models → Compare models…) to see both models' distributions."


class CompareTokensView(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.header = QLabel(NOTHING)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setWordWrap(True)
        self.base_title, self.second_title = QLabel(), QLabel()
        self.base_table, self.second_table = _table(), _table()
        sides = QHBoxLayout()
        for title, table in ((self.base_title, self.base_table), (self.second_title, self.second_table)):
            title.setWordWrap(True)
            column = QVBoxLayout()
            column.addWidget(title)
            column.addWidget(table, 1)
            sides.addLayout(column, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addWidget(self.header)
        layout.addLayout(sides, 1)

    def show_token(self, comparison: Comparison | None, row, colors: Colors | None = None) -> None:
        """``row``: the selected token's ``TokenKLD`` in ``comparison`` (None: nothing to show)."""
        self.colors = colors or self.colors
        if comparison is None or row is None:
            self.header.setText(NOTHING)
            for title, table in ((self.base_title, self.base_table), (self.second_title, self.second_table)):
                title.setText("")
                table.setRowCount(0)
            return
        piece = comparison.piece
        base_top, second_top = row.top_base[0][0], row.top_model[0][0]
        top = (
            "most likely token: the same"
            if row.same_top
            else f"<span style='color:{DIFFERS.name()}'>most likely token differs: "
            f"<code>{escape(visible(piece(base_top)))}</code> vs "
            f"<code>{escape(visible(piece(second_top)))}</code></span>"
        )
        self.header.setText(
            f"<b>Token {row.index}</b> &nbsp;<code>{escape(visible(piece(row.token_id)))}</code> &nbsp; "
            f"KLD {num(row.kld)} nats · p_base {percent(row.logprob_base)} · "
            f"p_model {percent(row.logprob_model)}<br>{top}"
        )
        self.base_title.setText(f"<b>running</b>: {escape(comparison.base.label)}")
        self.second_title.setText(f"<b>compared with</b>: {escape(comparison.second.label)}")
        self._fill(self.base_table, row.top_base, row.top_model, row.token_id, piece)
        self._fill(self.second_table, row.top_model, row.top_base, row.token_id, piece)

    def _fill(self, table: QTableWidget, mine, other, chosen: int, piece) -> None:
        ranks = {t: k for k, (t, _) in enumerate(other, 1)}
        tint = QColor(self.colors.chosen)
        tint.setAlpha(60)
        table.setRowCount(len(mine))
        for r, (token, logprob) in enumerate(mine):
            rank = ranks.get(token)
            differs = rank != r + 1
            values = (
                str(r + 1),
                visible(piece(token)),
                percent(logprob),
                f"{logprob:.4f}" if math.isfinite(logprob) else "−inf",
                str(rank) if rank is not None else "—",
            )
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                if c != 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                font = item.font()
                font.setBold(token == chosen)
                item.setFont(font)
                if token == chosen:
                    item.setBackground(QBrush(tint))
                if differs and c in (1, 4):
                    item.setForeground(QBrush(DIFFERS))
                    item.setToolTip("Not in the other model's top list" if rank is None else f"Rank {rank} there")
                table.setItem(r, c, item)
        table.resizeColumnsToContents()


def _table() -> QTableWidget:
    table = QTableWidget(0, len(COLUMNS))
    table.setHorizontalHeaderLabels(COLUMNS)
    table.horizontalHeaderItem(len(COLUMNS) - 1).setToolTip(OTHER_TIP)
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setTabKeyNavigation(False)  # Tab leaves the table (arrows move in it)
    table.setWordWrap(False)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    return table
