"""Models → Library…: every model found on disk in one table.

The rows are ``engine.library.LibraryEntry`` objects; their words, sort keys and the search
are :mod:`app.model.library_table`'s. The table searches as you type (a
``QSortFilterProxyModel`` over the whole list), sorts by any column (sizes by bytes), greys a
model that cannot be loaded and says why in its own column and its tooltip. A double-click,
Enter or Load on a loadable row asks for it to be loaded (``load_requested``: what
``engine.models.load`` takes); on one that cannot be, the reason goes to the status line and
nothing loads. The dialog does not scan: the shell scans off the GUI thread and hands the rows
in (:meth:`LibraryDialog.set_scanning`, :meth:`LibraryDialog.set_entries`).
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import (
    QAbstractTableModel,
    QCoreApplication,
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QProgressBar,
    QPushButton,
    QStyledItemDelegate,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.model import library_table as words
from app.model.library_table import COLUMN_KEYS, COLUMNS

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
COLUMN_CAP = 200
"""The widest a column but Path starts (pixels): the whole text is in the row's tooltip."""
WARNING_STYLE = "color: #c26a00;"
ROW_KEYS = (Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown)
"""Keys the search field hands to the table, so the rows can be walked without leaving it."""
_Index = QModelIndex | QPersistentModelIndex


class LibraryModel(QAbstractTableModel):
    """The scanned entries, one row each, in the library's order (source, then name)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entries: list = []

    def set_entries(self, entries: Sequence) -> None:
        self.beginResetModel()
        self.entries = list(entries)
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt's signature)
        return 0 if parent.isValid() else len(self.entries)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        entry, key = self.entries[index.row()], COLUMN_KEYS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return words.cell_text(entry, key)
        if role == SORT_ROLE:
            return words.sort_key(entry, key)
        if role == Qt.ItemDataRole.ToolTipRole:
            return words.row_tooltip(entry)
        if role == Qt.ItemDataRole.ForegroundRole and not entry.loadable:
            # Greyed as a disabled item is, yet still selectable: a double-click says why.
            return QGuiApplication.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
        if role == Qt.ItemDataRole.TextAlignmentRole and key == "size":
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(self, section: int, orientation, role: int = Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section].title
        if role == Qt.ItemDataRole.ToolTipRole:
            return COLUMNS[section].tip
        return None


class MiddleElided(QStyledItemDelegate):
    """Paths cut in the middle: where a model is differs at both ends (the program's folder,
    the model's own name), and the whole path is in the tooltip."""

    def initStyleOption(self, option, index) -> None:  # noqa: N802 (Qt's name)
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideMiddle


class LibraryFilter(QSortFilterProxyModel):
    """The rows whose name, path, architecture, source or format hold every word typed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.query = ""
        self.setSortRole(SORT_ROLE)

    def set_query(self, query: str) -> None:
        self.query = query
        self.invalidateRowsFilter()  # not beginFilterChange: that is Qt 6.9's, and 6.8 is allowed

    def filterAcceptsRow(self, row: int, parent: _Index) -> bool:  # noqa: N802 (Qt's name)
        source = self.sourceModel()
        return words.matches(source.entries[row], self.query)


class LibraryDialog(QDialog):
    load_requested = Signal(str)  # what engine.models.load takes (LibraryEntry.model_source)
    rescan_requested = Signal()
    add_folder_requested = Signal()
    remove_folder_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model library")
        self.resize(1100, 560)
        self.scanning = False
        self.seconds: float | None = None
        self.model = LibraryModel(self)
        self.proxy = LibraryFilter(self)
        self.proxy.setSourceModel(self.model)

        self.search = QLineEdit()
        self.search.setPlaceholderText("Search by name, path, architecture, source or format")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._on_search)
        self.search.installEventFilter(self)  # ↑ ↓ move through the rows while typing
        self.table = self._make_table()
        self.status = QLabel(words.SCANNING)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # a busy bar: a scan's length is not known
        self.busy.setMaximumWidth(120)
        self.busy.hide()

        layout = QVBoxLayout(self)
        layout.addWidget(self.search)
        layout.addWidget(self.table, 1)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.busy)
        layout.addLayout(status_row)
        layout.addLayout(self._make_buttons())
        self.search.setFocus()

    def _make_table(self) -> QTableView:
        table = QTableView()
        table.setModel(self.proxy)
        table.setSortingEnabled(True)
        table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # the library's order until a header is clicked
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setAlternatingRowColors(True)
        table.setWordWrap(False)
        table.verticalHeader().hide()
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        table.setItemDelegateForColumn(COLUMN_KEYS.index("path"), MiddleElided(table))
        table.doubleClicked.connect(self.activate)
        table.selectionModel().currentRowChanged.connect(lambda *_: self._update_load())
        return table

    def _make_buttons(self) -> QHBoxLayout:
        self.add_button = QPushButton("Add folder…")
        self.add_button.setToolTip("Look for models in a folder of your own too (remembered)")
        self.add_button.clicked.connect(self.add_folder_requested)
        self.remove_button = QPushButton("Remove folder")
        self.remove_menu = QMenu(self.remove_button)
        self.remove_button.setMenu(self.remove_menu)
        self.rescan_button = QPushButton("Rescan")
        self.rescan_button.clicked.connect(self.rescan_requested)
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.reject)
        self.load_button = QPushButton("Load")
        self.load_button.clicked.connect(lambda: self.activate(self.table.currentIndex()))
        for button in (self.add_button, self.remove_button, self.rescan_button, self.close_button):
            button.setAutoDefault(False)  # Enter loads the selected row, whichever button was used
        self.load_button.setDefault(True)
        row = QHBoxLayout()
        for button in (self.add_button, self.remove_button, self.rescan_button):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(self.close_button)
        row.addWidget(self.load_button)
        self.set_folders([])
        self._update_load()
        return row

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if watched is self.search and event.type() == QEvent.Type.KeyPress and event.key() in ROW_KEYS:
            QCoreApplication.sendEvent(self.table, event)  # the row moves; the typing goes on
            return True
        return super().eventFilter(watched, event)

    # What the shell hands in ----------------------------------------------------------------

    def set_scanning(self) -> None:
        """A scan has started: the rows stay until the new ones come."""
        self.scanning = True
        self.busy.show()
        self.rescan_button.setEnabled(False)
        self.show_message(words.SCANNING)

    def set_entries(self, entries: Sequence, seconds: float | None = None) -> None:
        """The scan's rows; the row selected before stays selected where it is still listed."""
        selected = self.current_entry()
        self.scanning = False
        self.seconds = seconds
        self.busy.hide()
        self.rescan_button.setEnabled(True)
        self.model.set_entries(entries)
        keep = next((i for i, e in enumerate(self.model.entries) if selected and e.path == selected.path), None)
        if keep is not None:
            self.table.selectRow(self.proxy.mapFromSource(self.model.index(keep, 0)).row())
        self._after_rows_changed()
        self.table.resizeColumnsToContents()
        for column in range(len(COLUMNS) - 1):  # long reasons and names must not push Path away
            self.table.setColumnWidth(column, min(self.table.columnWidth(column), COLUMN_CAP))

    def set_folders(self, folders: Sequence[str]) -> None:
        """The folders the user added: Remove folder's menu lists them."""
        self.remove_menu.clear()
        for folder in folders:
            action = self.remove_menu.addAction(folder)
            action.triggered.connect(lambda _=False, f=folder: self.remove_folder_requested.emit(f))
        self.remove_button.setEnabled(bool(folders))
        self.remove_button.setToolTip("Stop looking in a folder you added" if folders else "No folder was added")

    def show_message(self, text: str, warning: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(WARNING_STYLE if warning else "")

    # Rows -------------------------------------------------------------------------------------

    def entry_at(self, index: QModelIndex):
        if not index.isValid():
            return None
        return self.model.entries[self.proxy.mapToSource(index).row()]

    def current_entry(self):
        return self.entry_at(self.table.currentIndex())

    def visible_entries(self) -> list:
        """The rows shown, in the order shown."""
        return [self.entry_at(self.proxy.index(row, 0)) for row in range(self.proxy.rowCount())]

    def row_of(self, name: str) -> int:
        """The shown row of the entry named ``name`` (tests, screenshots); -1 if not shown."""
        return next((row for row, e in enumerate(self.visible_entries()) if e.name == name), -1)

    def activate(self, index: QModelIndex) -> None:
        """Double-click, Enter or Load: load the row, or say why it cannot be."""
        entry = self.entry_at(index)
        if entry is None:
            self.show_message("Select a model to load.", warning=True)
            return
        if not entry.loadable:
            self.show_message(words.not_loadable_words(entry), warning=True)
            return
        self.show_message(f"Loading {entry.model_source}…")
        self.load_requested.emit(entry.model_source)
        self.accept()  # the window's status bar shows the load's progress, and its errors

    def _on_search(self, text: str) -> None:
        self.proxy.set_query(text)
        self._after_rows_changed()

    def _after_rows_changed(self) -> None:
        # A row stays selected whenever one is shown, so Enter after typing loads the top match.
        if not self.table.currentIndex().isValid() and self.proxy.rowCount():
            self.table.selectRow(0)
        if not self.scanning:
            self.show_message(words.summary(self.model.entries, self.proxy.rowCount(), self.seconds))
        self._update_load()

    def _update_load(self) -> None:
        entry = self.current_entry()
        self.load_button.setEnabled(entry is not None)
        tip = "Select a model" if entry is None else words.row_tooltip(entry).splitlines()[0]
        self.load_button.setToolTip(tip)
