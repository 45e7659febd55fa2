"""File dialogs that open where the last one of their kind was answered.

Qt's static dialogs open in the working directory when given no folder: the same place every
time, and for an app started from a launcher, anywhere. Each kind of file has its own last
folder here, kept in the app's settings (``last_folder/<kind>``), so it is there again after a
restart: model folders and GGUF files, exports (written and opened), plots, texts to score. A
kind not used yet opens in the home folder.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QDir, QSettings
from PySide6.QtWidgets import QFileDialog, QWidget

MODELS = "models"
"""Model folders and GGUF files (Models → Open…, Compare models…)."""
EXPORTS = "exports"
"""JSON Lines and CSV exports, written and opened (File → Export, Open export…)."""
PLOTS = "plots"
"""The timeline and the inspector as PNG or SVG."""
TEXTS = "texts"
"""Texts to score (File → Score text… → Open .txt / .md…)."""
GRAMMARS = "grammars"
"""JSON schemas, regexes and grammars (the Sampling dock's Structured output → Open…)."""
KINDS = (MODELS, EXPORTS, PLOTS, TEXTS, GRAMMARS)


def settings_key(kind: str) -> str:
    return f"last_folder/{kind}"


class Folders:
    """The last folder of each kind of file; None settings remember nothing (a dialog opened
    outside the window)."""

    def __init__(self, settings: QSettings | None) -> None:
        self.settings = settings

    def start(self, kind: str) -> str:
        """Where a dialog of ``kind`` opens: the folder its last answer was in, if it is still
        there, else the home folder."""
        saved = self.settings.value(settings_key(kind)) if self.settings is not None else None
        if isinstance(saved, str) and saved and Path(saved).is_dir():
            return saved
        return QDir.homePath()

    def remember(self, kind: str, picked: str) -> None:
        """``picked`` (a file, or a model folder) was chosen: its folder is where the next opens,
        so a model folder's neighbours are in view again."""
        if self.settings is not None and picked:
            self.settings.setValue(settings_key(kind), str(Path(picked).parent))

    # The dialogs ---------------------------------------------------------------------------

    def open_file(self, parent: QWidget | None, kind: str, caption: str, filters: str) -> str:
        path, _ = QFileDialog.getOpenFileName(parent, caption, self.start(kind), filters)
        self.remember(kind, path)
        return path

    def save_file(self, parent: QWidget | None, kind: str, caption: str, name: str, filters: str) -> str:
        """``name``: the file name offered, in the kind's last folder."""
        path, _ = QFileDialog.getSaveFileName(parent, caption, str(Path(self.start(kind)) / name), filters)
        self.remember(kind, path)
        return path

    def open_folder(self, parent: QWidget | None, kind: str, caption: str) -> str:
        folder = QFileDialog.getExistingDirectory(parent, caption, self.start(kind))
        self.remember(kind, folder)
        return folder
