"""The chain view: one token's candidates through every stage that ran, as a heat map.

Rows are the candidates in their ``raw`` rank (the order never changes across
columns, so a token can be followed left to right); columns are the stages of
``step.chain`` under their exact names, each header giving the entropy and the
number of tokens left after that stage (the grammar's, also the probability it removed).
A cell is the candidate's probability after that stage, its colour the same number (square-root scale, or log10 with the
inspector's log toggle, so a 1 % token is still visible beside a 90 % one). Where a
stage removed a token the cell says so ("✕ top_k") and the rest of its row is grey.
The chosen token's row is framed and its name marked ▶.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
)

from app.model.remote_labels import NOT_REPORTED, is_chosen, sort_key, token_id_text
from app.model.structured import header_line, record_words, wanted_text
from app.model.textfmt import prob, visible
from app.views.theme import LIGHT, Colors
from engine.api.events import Candidate, TokenStep

VALUE_ROLE = Qt.ItemDataRole.UserRole
"""A cell's probability (0 when removed); a header's stage name."""
REMOVED_ROLE = Qt.ItemDataRole.UserRole + 1
"""The stage that removed the token, on that stage's cell and every cell after it."""
LOG_FLOOR = -6.0  # log10 p coloured down to 1e-6

Index = QModelIndex | QPersistentModelIndex


def raw_rank(step: TokenStep) -> list[Candidate]:
    """The step's candidates, most likely under ``raw`` first (ties by token id); a
    remote step (no raw logits) in the rank of the one stage the server reported."""
    return sorted(step.top, key=lambda c: sort_key(step, c))


def format_p(p: float) -> str:
    """Short enough for a narrow column, exact enough to compare stages."""
    if p >= 0.1:
        return f"{100 * p:.1f}%"
    if p >= 0.001:
        return f"{100 * p:.2f}%"
    if p > 0.0:
        return f"{p:.0e}"
    return "0"


def format_nats(h: float | None, digits: int = 2) -> str:
    """An entropy: never negative, so a float rounding's -1e-9 reads 0.00, not -0.00."""
    return "?" if h is None or math.isnan(h) else f"{max(0.0, h):.{digits}f}"


def format_entropy(h: float | None) -> str:
    return f"H {format_nats(h)}"


def format_survivors(n: int | None) -> str:
    return "n ?" if n is None else f"n {n:,}"


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * t,
        a.greenF() + (b.greenF() - a.greenF()) * t,
        a.blueF() + (b.blueF() - a.blueF()) * t,
    )


class ChainModel(QAbstractTableModel):
    """Candidates (rows, raw rank) × stages of the chain (columns)."""

    def __init__(self) -> None:
        super().__init__()
        self.step: TokenStep | None = None
        self.candidates: list[Candidate] = []
        self.colors: Colors = LIGHT
        self.log_scale = False

    def set_step(self, step: TokenStep | None, colors: Colors, log_scale: bool) -> None:
        self.beginResetModel()
        self.step, self.colors, self.log_scale = step, colors, log_scale
        self.candidates = raw_rank(step) if step is not None else []
        self.endResetModel()

    @property
    def stages(self) -> tuple[str, ...]:
        return self.step.chain if self.step is not None else ()

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self.candidates)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.stages)

    def removed_at(self, cand: Candidate) -> int | None:
        """The column of the stage that removed ``cand``, if one did."""
        if cand.removed_by is not None and cand.removed_by in self.stages:
            return self.stages.index(cand.removed_by)
        # A step that predates ``removed_by`` may still carry -inf: the first one is where.
        return next((i for i, v in enumerate(cand.logprobs) if v == -math.inf), None)

    def heat(self, p: float) -> float:
        if p <= 0.0:
            return 0.0
        if self.log_scale:
            return max(0.0, (max(LOG_FLOOR, math.log10(p)) - LOG_FLOOR) / -LOG_FLOOR)
        return math.sqrt(p)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or self.step is None:
            return None
        cand = self.candidates[index.row()]
        col = index.column()
        stage = self.stages[col]
        logprob = cand.logprobs[col]
        p = prob(logprob)
        removed = self.removed_at(cand)
        gone = removed is not None and col >= removed
        chosen = is_chosen(self.step, cand)
        c = self.colors
        if role == VALUE_ROLE:
            return p
        if role == REMOVED_ROLE:
            return self.stages[removed] if gone else None
        if role == Qt.ItemDataRole.DisplayRole:
            if gone:
                return f"✕ {self.stages[removed]}" if col == removed else ""
            return NOT_REPORTED if logprob is None else format_p(p)  # never 0: the server did not say
        if role == Qt.ItemDataRole.BackgroundRole:
            if gone:
                return QColor(c.removed)
            return _mix(QColor(c.background), QColor(c.final), 0.85 * self.heat(p))
        if role == Qt.ItemDataRole.ForegroundRole:
            if gone:
                return QColor(c.raw)
            strong = 0.85 * self.heat(p) > 0.55
            return QColor(c.background if strong and not c.dark else c.foreground)
        if role == Qt.ItemDataRole.FontRole and chosen:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            text = visible(cand.text)
            if gone:
                return f"“{text}” was removed by {self.stages[removed]}."
            change = ""
            before = cand.logprobs[col - 1] if col > 0 else None
            if before is not None and math.isfinite(before):
                change = f" (was {format_p(math.exp(before))} after {self.stages[col - 1]})"
            if logprob is None:
                return f"“{text}” after {stage}: {NOT_REPORTED}"
            return f"“{text}” after {stage}: p = {format_p(p)}, logprob {logprob:.3f}{change}"
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if self.step is None:
            return None
        if orientation == Qt.Orientation.Horizontal:
            if section >= len(self.stages):
                return None
            stage = self.stages[section]
            h, n = self.step.entropies[section], self.step.survivors[section]
            remote = self.step.reported_stage is not None
            if role == Qt.ItemDataRole.DisplayRole:
                if remote:  # the server sent this stage's logprobs only
                    return f"{stage} (server)\nH {NOT_REPORTED}\nn {NOT_REPORTED}"
                text = f"{stage}\n{format_entropy(h)}\n{format_survivors(n)}"
                if stage == "grammar" and self.step.grammar is not None:  # the mass it took
                    text += f"\n{header_line(self.step.grammar)}"
                return text
            if role == VALUE_ROLE:
                return stage
            if role == Qt.ItemDataRole.ToolTipRole and remote:
                return (
                    f"The server reports the distribution {stage} only; entropy, tokens left "
                    f"and the other stages are {NOT_REPORTED}."
                )
            if role == Qt.ItemDataRole.ToolTipRole:
                entropy = "unknown" if h is None else f"{format_nats(h, 3)} nats"
                left = "unknown" if n is None else f"{n:,}"
                tip = f"after {stage}: entropy {entropy}, tokens left {left}"
                if stage == "grammar" and self.step.grammar is not None:
                    tip += "\n" + record_words(self.step.grammar, wanted_text(self.step))
                return tip
            return None
        if section >= len(self.candidates):
            return None
        cand = self.candidates[section]
        chosen = is_chosen(self.step, cand)
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{'▶ ' if chosen else ''}{visible(cand.text)}"
        if role == Qt.ItemDataRole.ForegroundRole:
            if chosen:
                return QColor(self.colors.chosen)
            return QColor(self.colors.raw) if self.removed_at(cand) is not None else None
        if role == Qt.ItemDataRole.FontRole and chosen:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            if cand.raw_logit is None:
                return f"id {token_id_text(cand.token_id)} · rank {section + 1} · raw logit {NOT_REPORTED}"
            return f"id {cand.token_id} · raw rank {section + 1} · raw logit {cand.raw_logit:.3f}"
        return None


class ChosenRowDelegate(QStyledItemDelegate):
    """Frames the chosen token's row with the theme's "chosen" colour."""

    def __init__(self, model: ChainModel) -> None:
        super().__init__()
        self.model = model

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        super().paint(painter, option, index)
        step = self.model.step
        if step is None or not is_chosen(step, self.model.candidates[index.row()]):
            return
        painter.save()
        painter.setPen(QPen(QColor(self.model.colors.chosen), 2))
        r = option.rect.adjusted(0, 1, 0, -1)
        painter.drawLine(r.topLeft(), r.topRight())
        painter.drawLine(r.bottomLeft(), r.bottomRight())
        painter.restore()


class ChainView(QTableView):
    def __init__(self) -> None:
        super().__init__()
        self.chain_model = ChainModel()
        self.setModel(self.chain_model)
        self.setItemDelegate(ChosenRowDelegate(self.chain_model))
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setTabKeyNavigation(False)  # Tab leaves the table (arrows move in it)
        self.setShowGrid(False)
        self.setWordWrap(False)
        rows = self.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(self.fontMetrics().height() + 6)
        columns = self.horizontalHeader()
        columns.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        columns.setDefaultAlignment(Qt.AlignmentFlag.AlignCenter)

    def show_step(self, step: TokenStep | None, colors: Colors, log_scale: bool) -> None:
        self.chain_model.set_step(step, colors, log_scale)
        # Cells share one width (the eye compares a token's colour across stages, not
        # column widths); a column is wider only where its stage name needs it.
        # The widest a cell can read is a percentage or "✕ <stage>": measured from the text,
        # not by asking every cell for its size hint (that is most of a redraw).
        columns = self.horizontalHeader()
        count = self.chain_model.columnCount()
        bold = QFont(self.font())
        bold.setBold(True)  # the chosen token's row
        metrics = QFontMetrics(bold)
        removed = {c.removed_by for c in self.chain_model.candidates if c.removed_by}
        widest = ["100.0%", "0.00%", "8e-05", *(f"✕ {stage}" for stage in removed)]
        cells = max(metrics.horizontalAdvance(text) for text in widest) + 12
        for c in range(count):
            columns.resizeSection(c, max(cells, columns.sectionSizeHint(c)) + 4)
        self._fit_names(metrics)

    def _fit_names(self, bold: QFontMetrics) -> None:
        """The names' column as wide as its widest name. Qt keeps the row header's width
        from its last size hint, which it does not measure again when a new token has as
        many candidates as the last: longer names were cut ("␣cap", "officia")."""
        rows = self.verticalHeader()
        model = self.chain_model
        names = [model.headerData(r, Qt.Orientation.Vertical) or "" for r in range(model.rowCount())]
        if not names:
            return
        widest = max(range(len(names)), key=lambda r: bold.horizontalAdvance(names[r]))
        width = max(rows.sectionSizeFromContents(widest).width(), bold.horizontalAdvance(names[widest]) + 12)
        if rows.width() != width:
            rows.setFixedWidth(width)
            self.updateGeometries()
