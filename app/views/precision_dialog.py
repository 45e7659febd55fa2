"""The Check precision dialog: how far the selected reply's distributions in the running
precision are from float32's (``app.shell.controllers.precision_check`` computes them), as a summary with a
plain verdict and a per-token table, the worst tokens first and the ones over the
tolerance highlighted."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.model.precision import verdict, worst_first
from app.model.textfmt import escape, visible

COLUMNS = ("#", "token", "KL (nats)", "top-5 diff (nats)", "top agrees")
COLUMN_TIPS = (
    "The token's index in the reply",
    "The reply's token at that position",
    "KL(float32 ‖ this precision) over the whole vocabulary",
    "The largest |logprob − float32's| over float32's five most likely tokens",
    "Whether the most likely token is float32's",
)
OVER = QColor(255, 214, 204)  # a row over the tolerance: light enough for dark text in both themes


def summary_html(summary) -> str:
    """The summary as a small table (rich text), the verdict under it."""
    rows = (
        ("Computed in", escape(summary.precision)),
        ("Tokens checked", str(summary.tokens)),
        ("KL from float32", f"mean {summary.kld_mean:.2e} · max {summary.kld_max:.2e} nats"),
        ("Largest top-5 logprob difference", f"{summary.top5_max_diff:.4f} nats (tolerance {summary.tolerance})"),
        ("Top token agrees with float32", f"{summary.top_agreement:.1%} of tokens"),
    )
    cells = "".join(f"<tr><td>{k}&nbsp;&nbsp;</td><td><b>{v}</b></td></tr>" for k, v in rows)
    color = "#1a7f37" if summary.within_tolerance else "#b42318"
    return f"<table>{cells}</table><p style='color:{color}'><b>{escape(verdict(summary))}</b></p>"


class PrecisionDialog(QDialog):
    switch_requested = Signal(str)  # a precision choice to reload in

    def __init__(self, summary, rows, pieces: list[str], parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Check precision")
        self.summary, self.rows = summary, worst_first(list(rows))
        layout = QVBoxLayout(self)
        self.summary_label = QLabel(summary_html(summary))
        self.summary_label.setTextFormat(Qt.TextFormat.RichText)
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.summary_label)
        tolerance = summary.tolerance
        layout.addWidget(
            QLabel(
                f"Every token, the largest top-5 difference first (red: over {tolerance} nats, or another top token):"
            )
        )
        self.table = self._table(pieces)
        layout.addWidget(self.table, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        if not summary.within_tolerance:
            self.switch_button = QPushButton("Compute in float32 and reload")
            self.switch_button.clicked.connect(self._switch)
            buttons.addButton(self.switch_button, QDialogButtonBox.ButtonRole.ActionRole)
        layout.addWidget(buttons)
        self.resize(620, 520)

    def _table(self, pieces: list[str]) -> QTableWidget:
        table = QTableWidget(len(self.rows), len(COLUMNS))
        table.setHorizontalHeaderLabels(COLUMNS)
        for col, tip in enumerate(COLUMN_TIPS):
            table.horizontalHeaderItem(col).setToolTip(tip)
        table.verticalHeader().hide()
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        tolerance = self.summary.tolerance
        for r, row in enumerate(self.rows):
            piece = pieces[row.index] if 0 <= row.index < len(pieces) else f"id {row.token_id}"
            values = (
                str(row.index),
                visible(piece),
                f"{row.kld:.2e}",
                f"{row.top5_max_diff:.4f}",
                "yes" if row.top_agrees else "no",
            )
            over = row.top5_max_diff > tolerance or not row.top_agrees
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                if c != 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if over:
                    item.setBackground(QBrush(OVER))
                    item.setForeground(QBrush(QColor("black")))
                table.setItem(r, c, item)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        return table

    def _switch(self) -> None:
        self.switch_requested.emit("float32")
        self.accept()
