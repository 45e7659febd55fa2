"""Models → Library…: the GUI's end of ``engine.library``.

``scan_library()`` reads folders and small headers only, yet a home with a slow disk or
hundreds of models could still hold the GUI thread for a while: it runs on a thread of its
own (a ``QtBackground`` of this controller's, not the window's, whose one thread serializes
saved replies) and the dialog says *Scanning…* until the rows come back. A double-click loads
the row through the loader's own path (``ModelLoader.load``, as Models → Open… and
Recent do: the question during a reply, the progress in the status bar, the error box).
Add folder… and Remove folder persist through ``engine.library.add_folder`` /
``remove_folder`` and scan again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject

from app.shell.background import QtBackground
from app.shell.context import ShellContext
from app.shell.startup.logging_setup import note_error
from app.views.file_dialogs import MODELS
from app.views.library_dialog import LibraryDialog

SHORTCUT = "Ctrl+Shift+L"
TIP = "Every model on this machine: Logitscope's, the Hugging Face cache, LM Studio, Ollama, your folders"


class LibraryController(QObject):
    """Models → Library… (Ctrl+Shift+L, ``action``): the dialog (made at first use, kept for
    the next), its scans and what it asks for."""

    def __init__(self, context: ShellContext, load: Callable[[str], None]) -> None:
        super().__init__(context.parent)
        self.context, self.load = context, load
        self.dialog: LibraryDialog | None = None
        self.action = context.actions.add("Library…", self.open, shortcut=SHORTCUT, tooltip=TIP, status_tip=TIP)
        self.scanner = QtBackground(self)
        self.scans = 0  # a scan's number: the rows of an older one that answers late are dropped

    def open(self) -> LibraryDialog:
        if self.dialog is None:
            self.dialog = LibraryDialog(self.context.parent)
            self.dialog.load_requested.connect(self.load)
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

        folder = self.context.folders.open_folder(self.dialog, MODELS, "Add a folder of models to the library")
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
