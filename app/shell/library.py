"""Models → Library…: the GUI's end of ``engine.library`` (issue 25, point 1).

``scan_library()`` reads folders and small headers only, yet a home with a slow disk or
hundreds of models could still hold the GUI thread for a while: it runs on a thread of its
own (a ``QtBackground`` of this controller's, not the window's, whose one thread serializes
saved replies) and the dialog says *Scanning…* until the rows come back. A double-click loads
the row through the window's own path (``MainWindow.load_model``, as Models → Open… and
Recent do: the question during a reply, the progress in the status bar, the error box).
Add folder… and Remove folder persist through ``engine.library.add_folder`` /
``remove_folder`` and scan again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu

from app.shell.background import QtBackground
from app.shell.logging_setup import note_error
from app.views.file_dialogs import MODELS
from app.views.library_dialog import LibraryDialog

if TYPE_CHECKING:
    from app.shell.window import MainWindow

SHORTCUT = "Ctrl+Shift+L"


class LibraryController(QObject):
    """The dialog (made at first use, kept for the next), its scans and what it asks for."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.dialog: LibraryDialog | None = None
        self.action: QAction | None = None  # Models → Library…
        self.scanner = QtBackground(self)
        self.scans = 0  # a scan's number: the rows of an older one that answers late are dropped

    def open(self) -> LibraryDialog:
        if self.dialog is None:
            self.dialog = LibraryDialog(self.window)
            self.dialog.load_requested.connect(self.window.load_model)
            self.dialog.rescan_requested.connect(self.scan)
            self.dialog.add_folder_requested.connect(self.add_folder)
            self.dialog.remove_folder_requested.connect(self.remove_folder)
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()
        self.dialog.search.setFocus()
        self.scan()  # what is on disk now: models come and go while the app runs
        return self.dialog

    def scan(self) -> None:
        from engine.library import added_folders, scan_library

        self.scans += 1
        number = self.scans
        self.dialog.set_scanning()

        def work():
            started = time.perf_counter()
            entries = scan_library()
            folders = [str(folder) for folder in added_folders()]
            return entries, folders, time.perf_counter() - started

        self.scanner(work, lambda result: self._on_scanned(number, result))

    def _on_scanned(self, number: int, result) -> None:
        if number != self.scans or self.dialog is None:
            return
        if isinstance(result, Exception):  # scan_library reports bad files as rows: this is a bug
            note_error(f"the model library could not be scanned: {result}", result)
            self.dialog.set_entries([])
            self.dialog.show_message(f"Could not scan for models: {result}", warning=True)
            return
        entries, folders, seconds = result
        self.dialog.set_folders(folders)
        self.dialog.set_entries(entries, seconds)

    def add_folder(self) -> None:
        from engine.library import add_folder

        folder = self.window.folders.open_folder(self.dialog, MODELS, "Add a folder of models to the library")
        if not folder:
            return
        self._change(lambda: add_folder(folder), f"Could not add {folder}")

    def remove_folder(self, folder: str) -> None:
        from engine.library import remove_folder

        self._change(lambda: remove_folder(folder), f"Could not remove {folder}")

    def _change(self, change, failed: str) -> None:
        try:
            change()
        except OSError as exc:  # the config folder cannot be written: said, and nothing changes
            note_error(f"{failed}: {exc}", exc)
            self.dialog.show_message(f"{failed}: {exc}", warning=True)
            return
        self.scan()


def add_library_action(window: MainWindow, menu: QMenu) -> LibraryController:
    """Models → Library… (Ctrl+Shift+L); the controller behind it."""
    controller = LibraryController(window)
    action = QAction("Library…", window)
    action.setShortcut(QKeySequence(SHORTCUT))
    tip = "Every model on this machine: Logitscope's, the Hugging Face cache, LM Studio, Ollama, your folders"
    action.setToolTip(tip)
    action.setStatusTip(tip)
    action.triggered.connect(lambda _=False: controller.open())
    menu.addAction(action)
    controller.action = action
    return controller
