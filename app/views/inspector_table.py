"""The numbers under the bars: one row per candidate, in the bars' order.

Columns are sized to their content from font metrics (ResizeToContents left numbers
such as ``2.3e-05`` cut when a column had last been sized for shorter text, and asking
every cell for its size hint is most of a redraw). A row selected by hand names a
candidate: on the next token it follows that candidate (by token id) or goes, so it
never highlights a row that now names another token. Ctrl+C copies the selected rows
as tab-separated text with a header line.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QItemSelection, QItemSelectionModel
from PySide6.QtGui import QColor, QFont, QFontMetrics, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QAbstractItemView, QApplication, QHeaderView, QTableWidget, QTableWidgetItem

from app.model.inspector_settings import COUNT_NOTE, DRY_NOTE, FINAL_NOTE, PENALTY_NOTE
from app.model.remote_labels import NOT_REPORTED, is_chosen, token_id_text
from app.model.textfmt import percent, visible
from app.views.theme import Colors
from engine.api.events import Candidate, TokenStep

COLUMNS = ["token", "id", "raw logit", "p raw", "p final", "removed by", "bias", "penalty", "dry", "count"]
HEADER_TIPS = {
    "p raw": "The model's own probability (the raw distribution, before any stage).",
    "p final": FINAL_NOTE,
    "removed by": "The stage that took this token out of the distribution.",
    "bias": "logit_bias added to this token's logit.",
    "penalty": PENALTY_NOTE,
    "dry": DRY_NOTE,
    "count": COUNT_NOTE,
}
FINAL_COLUMN = COLUMNS.index("p final")
NOT_RECORDED = "not recorded"
CELL_PAD, HEADER_PAD = 14, 18  # the style's text margins (and the header's frame)


def row_values(step: TokenStep, cand: Candidate) -> list[str]:
    """One candidate's cells, as shown (and copied)."""
    raw_lp = step.logprob_at("raw", cand)
    return [
        visible(cand.text),
        token_id_text(cand.token_id),
        NOT_REPORTED if cand.raw_logit is None else f"{cand.raw_logit:.3f}",
        NOT_REPORTED if raw_lp is None else percent(raw_lp),
        NOT_REPORTED if cand.logprob is None else percent(cand.logprob),
        cand.removed_by or "",
        _effect(cand.bias, "{:+.2f}"),
        _effect(cand.penalty, "{:+.3f}"),
        dry_cell(step, cand),
        NOT_REPORTED if cand.count is None else (str(cand.count) if cand.count else ""),
    ]


def dry_cell(step: TokenStep, cand: Candidate) -> str:
    """DRY's change of the logit: empty where DRY did not run (or left it alone); a local
    step saved before candidates carried it says so rather than showing nothing."""
    if step.stage_index("dry") is None:
        return ""
    if cand.dry is None and step.reported_stage is None:
        return NOT_RECORDED
    return _effect(cand.dry, "{:+.3f}")


def row_key(cand: Candidate) -> tuple[int | None, str]:
    """What names a row's token across steps: its id, and its text where a server sent no id
    (rows of tokens without ids are then still told apart)."""
    return (cand.token_id, "" if cand.token_id is not None else cand.text)


def _effect(value: float | None, fmt: str) -> str:
    if value is None:
        return NOT_REPORTED
    return fmt.format(value) if value else ""


class CandidateTable(QTableWidget):
    def __init__(self) -> None:
        super().__init__(0, len(COLUMNS))
        self.ids: list[tuple[int | None, str]] = []  # the token of each row: (id, text), by text without an id
        for col, name in enumerate(COLUMNS):
            item = QTableWidgetItem(name)
            item.setToolTip(HEADER_TIPS.get(name, ""))
            self.setHorizontalHeaderItem(col, item)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setTabKeyNavigation(False)  # Tab leaves the table (arrows move in it)
        self.setWordWrap(False)
        self.verticalHeader().setVisible(False)
        rows = self.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        # A selection model made here, held by its own Python object: the one Qt makes is
        # found by address when asked for, and PySide can hand back a stale wrapper of a
        # deleted non-QObject (a QStandardItem) that had the same address (seen in CI). Qt's
        # own is a child of the table and goes with it.
        self.selection = QItemSelectionModel(self.model(), self)
        self.setSelectionModel(self.selection)

    def fill(self, step: TokenStep | None, candidates: list[Candidate], colors: Colors) -> None:
        """Show ``candidates`` of ``step`` (None: empty), keeping a hand-made selection on
        the same tokens."""
        kept = self.selected_ids()
        if step is None:
            self.ids = []
            self.setRowCount(0)
            return
        self._name_final_column(step)
        rows = [row_values(step, cand) for cand in candidates]
        self.ids = [row_key(cand) for cand in candidates]
        self.setRowCount(len(rows))
        for row, (cand, values) in enumerate(zip(candidates, rows, strict=True)):
            chosen = is_chosen(step, cand)
            color = QColor(colors.raw if cand.logprob == -math.inf else colors.foreground)
            for col, value in enumerate(values):
                item = self.item(row, col)
                if item is None:
                    item = QTableWidgetItem()
                    self.setItem(row, col, item)
                item.setText(value)
                font = item.font()
                font.setBold(chosen)
                item.setFont(font)
                item.setForeground(color)
        self._fit_columns(rows)
        self._select_ids(kept)

    def _name_final_column(self, step: TokenStep) -> None:
        """A server's numbers are one stage: the column says which (``p penalties``), not final."""
        item = self.horizontalHeaderItem(FINAL_COLUMN)
        stage = step.reported_stage
        name = "p final" if stage is None else f"p {stage}"
        if item.text() != name:
            item.setText(name)
            tip = HEADER_TIPS["p final"] if stage is None else f"The probability the server reported: after {stage}."
            item.setToolTip(tip)

    def _fit_columns(self, rows: list[list[str]]) -> None:
        bold = QFont(self.font())
        bold.setBold(True)  # the chosen token's row: the widest the text can be
        cells = QFontMetrics(bold)
        heads = QFontMetrics(self.horizontalHeader().font())
        for col in range(len(COLUMNS)):
            name = self.horizontalHeaderItem(col).text()
            widest = max((cells.horizontalAdvance(r[col]) for r in rows), default=0)
            self.setColumnWidth(col, max(widest + CELL_PAD, heads.horizontalAdvance(name) + HEADER_PAD))

    def selected_ids(self) -> set[tuple[int | None, str]]:
        rows = {index.row() for index in self.selection.selectedRows()}
        return {self.ids[r] for r in rows if r < len(self.ids)}

    def _select_ids(self, ids: set[tuple[int | None, str]]) -> None:
        selection = QItemSelection()
        for row, key in enumerate(self.ids):
            if key in ids:
                selection.select(self.model().index(row, 0), self.model().index(row, len(COLUMNS) - 1))
        flags = QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
        self.selection.select(selection, flags)

    # Copy ------------------------------------------------------------------------------------

    def copy_text(self) -> str:
        """The selected rows (else the current one) as tab-separated text, header first."""
        rows = sorted(index.row() for index in self.selection.selectedRows())
        if not rows and self.currentRow() >= 0:
            rows = [self.currentRow()]
        lines = ["\t".join(COLUMNS)]
        for row in rows:
            lines.append("\t".join(self.item(row, col).text() for col in range(len(COLUMNS))))
        return "\n".join(lines)

    def copy_rows(self) -> None:
        QApplication.clipboard().setText(self.copy_text())

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        if event.matches(QKeySequence.StandardKey.Copy):
            self.copy_rows()
            event.accept()
            return
        super().keyPressEvent(event)
