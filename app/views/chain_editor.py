"""The chain editor: the sampling stages as an ordered list, and the selected stage's parameters.

Each row is one reorderable stage, labelled with its exact name, with a switch
(checked = in ``samplers``; unchecked = left out of the chain, its values kept) and a
one-line summary of its values (greyed "no effect" when they are neutral, so the
stage will not show in the inspector). Rows are dragged to reorder (Qt's own
InternalMove, which moves the model row) or moved with the arrow buttons. Below the
list, the selected stage's parameters; ``bias`` (always first) and the draw (always
last) are not reorderable and not listed. Rows, pages, help and summaries are made from
the stage specs (``engine/specs/<name>.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from PySide6.QtCore import QModelIndex, QRect, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.views.lines_edit import LinesEdit
from app.views.param_fields import (
    CUSTOM_FIELDS,
    LIST_FIELDS,
    STAGE_FIELDS,
    SliderField,
    make_field,
    mark_error,
    narrow_form,
)
from engine.api.params import SAMPLER_STAGES, SamplingParams
from engine.specs.registry import SPECS

STAGE_ROLE = Qt.ItemDataRole.UserRole
SUMMARY_ROLE = Qt.ItemDataRole.UserRole + 1
NEUTRAL_ROLE = Qt.ItemDataRole.UserRole + 2
ERROR_COLOR = "#d93025"

STAGE_HELP = {name: spec.summary for name, spec in SPECS.items() if spec.reorderable}
"""Each stage's one-line help, from its spec."""


def stage_summary(stage: str, v: Mapping[str, Any]) -> tuple[str, bool]:
    """A short account of a stage's values, and whether they leave it neutral (no effect)."""
    spec, values = SPECS[stage], SimpleNamespace(**v)
    return spec.summary_text(values), spec.neutral(values)


class StageDelegate(QStyledItemDelegate):
    """Draws the row as usual (switch and name), then the summary after the name, muted."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        super().paint(painter, option, index)
        summary = index.data(SUMMARY_ROLE)
        if not summary:
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        style = opt.widget.style() if opt.widget is not None else None
        text_rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, opt.widget) if style else opt.rect
        name_width = opt.fontMetrics.horizontalAdvance(opt.text) + 14
        rect = QRect(text_rect.left() + name_width, text_rect.top(), text_rect.width() - name_width, text_rect.height())
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        role = opt.palette.ColorRole.HighlightedText if selected else opt.palette.ColorRole.PlaceholderText
        muted = QColor(opt.palette.color(role))
        if index.data(NEUTRAL_ROLE):
            summary += "  (no effect)"
        painter.save()
        painter.setPen(muted)
        painter.drawText(
            rect,
            Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
            opt.fontMetrics.elidedText(summary, Qt.TextElideMode.ElideRight, rect.width()),
        )
        painter.restore()


class ChainEditor(QWidget):
    changed = Signal()

    def __init__(self) -> None:
        super().__init__()
        self._loading = False
        self.vocab_size = 0
        """The loaded model's vocabulary size (0 = not known): a top-k at least this keeps all."""
        self.list = QListWidget()
        self.list.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.list.setDefaultDropAction(Qt.DropAction.MoveAction)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setItemDelegate(StageDelegate(self.list))
        self.list.setToolTip("Drag to reorder; the switch puts a stage in the chain or leaves it out.")
        # In a narrow dock the names are elided (each row's tooltip has it whole) rather than
        # scrolled sideways under a scroll bar that hid the last row.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.fields: dict[str, SliderField] = {}
        self.lists: dict[str, LinesEdit] = {}
        """The list fields (one string per line), by field name."""
        self.custom: dict[str, Any] = {f.name: f.default for fields in CUSTOM_FIELDS.values() for f in fields}
        """The values of fields edited in a section of their own (``grammar``: Structured
        output), kept here so that the rows' summaries and :meth:`values` hold them."""
        self.pages = QStackedWidget()
        self._page_of: dict[str, int] = {}
        self._stage_of_field: dict[str, str] = {}
        for stage in SAMPLER_STAGES:
            item = QListWidgetItem(stage)
            item.setData(STAGE_ROLE, stage)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsDragEnabled)
            item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsDropEnabled)  # drop between rows, not onto one
            item.setCheckState(Qt.CheckState.Checked)
            item.setToolTip(f"{stage}: {STAGE_HELP[stage]}")
            self.list.addItem(item)
            self._page_of[stage] = self.pages.addWidget(self._make_page(stage))
        rows = self.list.sizeHintForRow(0) * len(SAMPLER_STAGES) + 2 * self.list.frameWidth() + 4
        self.list.setFixedHeight(rows)
        self.list.itemChanged.connect(self._on_item_changed)
        self.list.model().rowsMoved.connect(self._on_rows_moved)
        self.list.currentRowChanged.connect(self._on_current_row)

        self.up = QPushButton("▲")
        self.down = QPushButton("▼")
        for button, delta, tip in ((self.up, -1, "Move the stage earlier"), (self.down, 1, "Move the stage later")):
            button.setFixedWidth(32)
            button.setToolTip(tip)
            button.clicked.connect(lambda _=False, d=delta: self._move_current(d))
        arrows = QVBoxLayout()
        arrows.addWidget(self.up)
        arrows.addWidget(self.down)
        arrows.addStretch(1)
        top = QHBoxLayout()
        top.addWidget(self.list, 1)
        top.addLayout(arrows)
        note = QLabel("bias runs first and the draw last; every other stage runs in this order.")
        note.setWordWrap(True)
        note.setEnabled(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(note)
        layout.addWidget(self.pages)
        self.list.setCurrentRow(SAMPLER_STAGES.index("temperature"))

    def _make_page(self, stage: str) -> QWidget:
        page = QWidget()
        form = narrow_form(QFormLayout(page))
        form.setContentsMargins(0, 4, 0, 0)
        title = QLabel(f"<b>{stage}</b> — {STAGE_HELP[stage]}")
        title.setWordWrap(True)
        form.addRow(title)
        for spec in STAGE_FIELDS[stage]:
            self.fields[spec.name] = make_field(spec, self._on_value)
            self._stage_of_field[spec.name] = stage
            form.addRow(spec.label, self.fields[spec.name])
        for field in LIST_FIELDS[stage]:
            edit = LinesEdit(f"{field.name}: {field.help}")
            edit.edited.connect(self._on_value)
            self.lists[field.name] = edit
            self._stage_of_field[field.name] = stage
            form.addRow(field.label, edit)
        for field in CUSTOM_FIELDS[stage]:
            self._stage_of_field[field.name] = stage
            where = QLabel(f"Set in <b>{field.label}</b>, below the chain.")
            where.setWordWrap(True)
            form.addRow(where)
        if SPECS[stage].constraint:
            place = QLabel(
                "A hard constraint: it runs whenever it is set. Switched off here, it runs first; "
                "switched on, at this row's place (greedy replies still draw only what it allows)."
            )
            place.setWordWrap(True)
            place.setEnabled(False)
            form.addRow(place)
        return page

    # The chain -------------------------------------------------------------------------

    def _items(self) -> list[QListWidgetItem]:
        return [self.list.item(row) for row in range(self.list.count())]

    def order(self) -> tuple[str, ...]:
        """Every stage, in the order of the rows (switched off or not)."""
        return tuple(item.data(STAGE_ROLE) for item in self._items())

    def samplers(self) -> tuple[str, ...]:
        """The stages switched on, in order: ``SamplingParams.samplers``."""
        return tuple(item.data(STAGE_ROLE) for item in self._items() if item.checkState() == Qt.CheckState.Checked)

    def values(self) -> dict[str, Any]:
        """Every value the editor holds, as SamplingParams fields."""
        values: dict[str, Any] = {name: field.value() for name, field in self.fields.items()}
        values.update({name: edit.lines() for name, edit in self.lists.items()})
        values.update(self.custom)
        values["samplers"] = self.samplers()
        return values

    def set_params(self, params: SamplingParams) -> None:
        """Show ``params``: the stages in ``samplers`` first and on, in their order, then
        the others off (their place in the chain is not part of the parameters); a constraint
        ``samplers`` leaves out (the grammar) at the top, off, where it runs."""
        self._loading = True
        try:
            for name, field in self.fields.items():
                field.set_value(getattr(params, name))
            for name, edit in self.lists.items():
                edit.set_lines(getattr(params, name))
            for name in self.custom:
                self.custom[name] = getattr(params, name)
            rest = [s for s in self.order() if s not in params.samplers]
            # A constraint left out of samplers runs first: its row is shown there, switched off.
            first = [s for s in rest if SPECS[s].constraint]
            rest = [s for s in rest if s not in first]
            self._arrange([*first, *params.samplers, *rest], set(params.samplers))
            self.update_summaries()
        finally:
            self._loading = False

    def set_custom(self, name: str, value: Any) -> None:
        """A field edited in its own section changed (``grammar``)."""
        self.custom[name] = value
        self._on_value()

    def _arrange(self, order: list[str], on: set[str]) -> None:
        current = self.current_stage()
        items = {item.data(STAGE_ROLE): item for item in self._items()}
        for row, stage in enumerate(order):
            item = items[stage]
            from_row = self.list.row(item)
            if from_row != row:
                self.list.model().moveRow(QModelIndex(), from_row, QModelIndex(), row if row < from_row else row + 1)
            item.setCheckState(Qt.CheckState.Checked if stage in on else Qt.CheckState.Unchecked)
        if current is not None:
            self.select_stage(current)

    def move_stage(self, stage: str, row: int) -> None:
        """Move ``stage`` to ``row`` (as a drag would)."""
        from_row = self.order().index(stage)
        row = max(0, min(row, self.list.count() - 1))
        if row != from_row:
            # QAbstractItemModel.moveRow takes the destination *before* which the row lands.
            self.list.model().moveRow(QModelIndex(), from_row, QModelIndex(), row if row < from_row else row + 1)
            self.select_stage(stage)

    def _move_current(self, delta: int) -> None:
        stage = self.current_stage()
        if stage is not None:
            self.move_stage(stage, self.list.currentRow() + delta)

    def set_stage_on(self, stage: str, on: bool) -> None:
        item = self._items()[self.order().index(stage)]
        item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)

    # Selection and errors -------------------------------------------------------------------

    def current_stage(self) -> str | None:
        item = self.list.currentItem()
        return item.data(STAGE_ROLE) if item is not None else None

    def select_stage(self, stage: str) -> None:
        self.list.setCurrentRow(self.order().index(stage))

    def stage_of(self, field: str) -> str | None:
        """The stage a parameter belongs to (``samplers`` belongs to none)."""
        return self._stage_of_field.get(field)

    def widget_for(self, field: str) -> QWidget | None:
        if field in self.lists:
            return self.lists[field]
        if field == "samplers":
            return self.list
        return self.fields.get(field)

    def show_error(self, field: str | None) -> None:
        """Outline the field at fault (and bring its stage into view); None clears."""
        self.show_errors(() if field is None else (field,))

    def show_errors(self, fields: Sequence[str] | Mapping[str, str]) -> None:
        """Outline every field at fault (with its reason as tooltip, where ``fields`` maps
        each to one), colour their stages' rows, and bring the first one's stage into view;
        an empty list clears."""
        reasons = fields if isinstance(fields, Mapping) else dict.fromkeys(fields, "")
        for name in [*self.fields, *self.lists, "samplers"]:
            mark_error(self.widget_for(name), "")
        ours = [f for f in fields if self.widget_for(f) is not None]
        stages = [stage for stage in map(self.stage_of, ours) if stage is not None]
        self.list.blockSignals(True)  # a colour is not a change of the chain
        for item in self._items():
            red = item.data(STAGE_ROLE) in stages
            item.setData(Qt.ItemDataRole.ForegroundRole, QColor(ERROR_COLOR) if red else None)
        self.list.blockSignals(False)
        for name in ours:
            mark_error(self.widget_for(name), reasons[name] or "invalid value")
        if stages:
            self.select_stage(stages[0])

    def update_summaries(self) -> None:
        values = self.values()
        self.list.blockSignals(True)
        for item in self._items():
            stage = item.data(STAGE_ROLE)
            text, neutral = stage_summary(stage, values)
            # A k at least the vocabulary keeps every token: no effect, as k = 0.
            neutral = neutral or (stage == "top_k" and 0 < self.vocab_size <= values["top_k"])
            item.setData(SUMMARY_ROLE, text)
            item.setData(NEUTRAL_ROLE, neutral)
        self.list.blockSignals(False)
        self.list.viewport().update()

    # Events ---------------------------------------------------------------------------------

    def _on_current_row(self, row: int) -> None:
        if row >= 0:
            self.pages.setCurrentIndex(self._page_of[self.list.item(row).data(STAGE_ROLE)])
        self.up.setEnabled(row > 0)
        self.down.setEnabled(0 <= row < self.list.count() - 1)

    def _on_item_changed(self, _item: QListWidgetItem) -> None:
        self._emit()

    def _on_rows_moved(self, *_args) -> None:
        self._on_current_row(self.list.currentRow())
        self._emit()

    def _on_value(self) -> None:
        self.update_summaries()
        self._emit()

    def _emit(self) -> None:
        if not self._loading:
            self.changed.emit()
