"""The Served list: every request the app's server answered, the newest first — when it
came, its client, its tokens so far and how it ended (*refused* for a 400), one row each
(the list lives in a narrow dock); under the list, the selected request's endpoint, model
and settings as the client sent them, in full, and a refused one's error. A click opens its
conversation (a request still being written streams there like a local reply; a refused one
has none). The list only shows; ``app.shell.controllers.serving`` fills it from
``app.model.served`` and opens what is clicked.
"""

from __future__ import annotations

import json
import time

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import QHeaderView, QLabel, QStyle, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from app.model.served import settings_text
from app.store.served_log import ServedRow

COLUMNS = ("Time", "Client", "Tokens", "State")
ID_ROLE = Qt.ItemDataRole.UserRole
EMPTY = "Nothing served yet: Server → Start serving…, then point a client at the address."
HINT = "Click a request to open its conversation: every token is inspectable."


def endpoint_of(row: ServedRow) -> str:
    return "/v1/chat/completions" if row.endpoint == "chat" else "/v1/completions"


STATES = ("writing…", "interrupted", "cancelled", "refused", "length", "error", "stop")
"""Every State the list can show (``state_words``: a finish reason, or one of its own)."""


def state_words(row: ServedRow, live: bool) -> str:
    if live:
        return "writing…"
    return row.finish_reason or "interrupted"


def time_words(when: float, now: float | None = None) -> str:
    """The time of day, with the date when it was not today."""
    local, today = time.localtime(when), time.localtime(now if now is not None else time.time())
    same_day = local[:3] == today[:3]
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", local)


class ServedList(QWidget):
    opened = Signal(int)  # the conversation id of the request clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.heading = QLabel("")
        self.heading.setWordWrap(True)
        layout.addWidget(self.heading)
        self.tree = QTreeWidget()
        self.tree.setRootIsDecorated(False)
        self.tree.setAlternatingRowColors(True)
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setUniformRowHeights(True)
        header = self.tree.header()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(False)
        header.setSectionResizeMode(COLUMNS.index("Client"), QHeaderView.ResizeMode.Stretch)
        # Tokens and State change with every token of every request: sized to fit the widest
        # they can say, not to their contents, which measured the whole column again at each
        # change (200 requests at once spent most of the GUI thread in setText, bench figure 29).
        for column in (COLUMNS.index("Tokens"), COLUMNS.index("State")):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
        self._fit_changing_columns()
        self.tree.itemActivated.connect(self._open)
        self.tree.itemClicked.connect(self._open)
        self.tree.currentItemChanged.connect(lambda item, _old: self._show_details(item))
        layout.addWidget(self.tree, 1)
        self.details = QLabel("")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.details)
        self._items: dict[int, QTreeWidgetItem] = {}
        self._rows: dict[int, ServedRow] = {}
        self.set_heading("")

    def _fit_changing_columns(self) -> None:
        header = self.tree.header()
        cells, heads = self.tree.fontMetrics(), header.fontMetrics()
        margin = 2 * self.tree.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin) + 12
        for column, widest in ((COLUMNS.index("Tokens"), ("0000000",)), (COLUMNS.index("State"), STATES)):
            need = max([heads.horizontalAdvance(COLUMNS[column])] + [cells.horizontalAdvance(w) for w in widest])
            header.resizeSection(column, need + margin)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fit_changing_columns()

    def set_heading(self, address: str) -> None:
        self.heading.setText(f"Serving on {address}" if address else "Not serving.")

    def set_rows(self, rows: list[ServedRow]) -> None:
        """Every row saved, the newest first (none is being written: the app has just started)."""
        self.tree.clear()
        self._items, self._rows = {}, {}
        for row in reversed(rows):
            self.add_row(row, live=False)
        self.details.setText(HINT if rows else EMPTY)

    def add_row(self, row: ServedRow, live: bool = True) -> None:
        if self.details.text() == EMPTY:
            self.details.setText(HINT)
        item = QTreeWidgetItem()
        item.setData(0, ID_ROLE, row.id)
        self._items[row.id] = item
        self.tree.insertTopLevelItem(0, item)
        self.update_row(row, live)

    def update_row(self, row: ServedRow, live: bool) -> None:
        item = self._items.get(row.id)
        if item is None:
            return
        self._rows[row.id] = row
        if not item.text(0):  # what never changes, once: under a burst a row changes with every token
            item.setText(0, time_words(row.created_at))
            item.setText(1, row.client or "unknown client")
            tip = f"{endpoint_of(row)} · {row.model}\nSettings sent: {json.dumps(row.sent, indent=2)}"
            if row.error:
                tip += f"\nRefused: {row.error}"
            for column in range(len(COLUMNS)):
                item.setToolTip(column, tip)
        for column, text in ((2, str(row.tokens)), (3, state_words(row, live))):
            if item.text(column) != text:
                item.setText(column, text)
        if item is self.tree.currentItem():
            self._show_details(item)

    def select_conversation(self, conversation_id: int | None) -> None:
        """Make the row of ``conversation_id`` current (the conversation open), if it has one."""
        for row_id, row in self._rows.items():
            if conversation_id is not None and row.conversation_id == conversation_id:
                self.tree.setCurrentItem(self._items[row_id])
                return

    def remove_row(self, row_id: int) -> None:
        item = self._items.pop(row_id, None)
        self._rows.pop(row_id, None)
        if item is not None:
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(item))

    def row_count(self) -> int:
        return len(self._items)

    def _row_of(self, item: QTreeWidgetItem | None) -> ServedRow | None:
        return self._rows.get(item.data(0, ID_ROLE)) if item is not None else None

    def _show_details(self, item: QTreeWidgetItem | None) -> None:
        row = self._row_of(item)
        if row is not None:
            refused = f"\nRefused (400): {row.error}" if row.error else ""
            self.details.setText(
                f"{endpoint_of(row)} · {row.model}\nSent: {settings_text(row.sent)}\nFrom: {row.client or 'unknown'}"
                + refused
            )

    def _open(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        row = self._row_of(item)
        if row is not None and row.conversation_id is not None:  # a refused request has none: its details say why
            self.opened.emit(row.conversation_id)
