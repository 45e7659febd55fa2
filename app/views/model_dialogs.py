"""What the dialogs that load a second model share (Models → Compare models…, Draft model…):
the row choosing a model (an editable source with Folder… and GGUF… beside it), the
precision choice, and a dialog that runs a job — its progress bar, its message line, and a
Close button that reads Cancel while the job runs (Esc and the window's close button cancel
it too). Each dialog adds its own form rows, buttons and results.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QDialog, QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from app.model.precision import CHOICE_LABELS, CHOICE_TIPS
from app.model.textfmt import escape
from app.views.file_dialogs import MODELS, Folders
from engine.api.precision import PRECISIONS

REFUSED_COLOR = "#b42318"


class SourcePicker(QWidget):
    """An editable model source (``combo``) with Folder… and GGUF… beside it; ``what``: the
    file dialogs' words for the model chosen (``to compare with``, ``for the draft``)."""

    def __init__(self, sources: list[str], tip: str, folders: Folders, what: str) -> None:
        super().__init__()
        self.folders, self.what = folders, what
        self.combo = QComboBox()
        self.combo.setEditable(True)
        self.combo.addItems(sources)
        self.combo.setToolTip(tip)
        self.combo.setMinimumContentsLength(36)
        self.folder_button = QPushButton("Folder…")
        self.folder_button.clicked.connect(self._pick_folder)
        self.gguf_button = QPushButton("GGUF…")
        self.gguf_button.clicked.connect(self._pick_gguf)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        row.addWidget(self.folder_button)
        row.addWidget(self.gguf_button)

    def text(self) -> str:
        return self.combo.currentText().strip()

    def set_running(self, running: bool) -> None:
        for widget in (self.combo, self.folder_button, self.gguf_button):
            widget.setEnabled(not running)

    def _pick_folder(self) -> None:
        folder = self.folders.open_folder(self, MODELS, f"A model folder {self.what}")
        if folder:
            self.combo.setCurrentText(folder)

    def _pick_gguf(self) -> None:
        path = self.folders.open_file(self, MODELS, f"A GGUF file {self.what}", "GGUF models (*.gguf)")
        if path:
            self.combo.setCurrentText(path)


CPU_BFLOAT16 = (
    "MLX's CPU has no fast bfloat16: in bfloat16 on this machine's CPU a model runs at a small "
    "fraction of its float32 speed (about 0.1 tokens/s was seen for a 135M model). Choose "
    "float32 or float16 unless you mean to wait."
)


def cpu_bfloat16_note(combo: QComboBox, device: str) -> QLabel:
    """A warning under a precision choice, shown while bfloat16 is chosen and MLX computes on
    the CPU (``ModelInfo.device``), before the person starts a load they would wait on."""
    note = QLabel(f"⚠ {CPU_BFLOAT16}")
    note.setWordWrap(True)
    note.setStyleSheet("color: #b35900;")

    def follow() -> None:
        note.setVisible(device == "cpu" and combo.currentData() == "bfloat16")

    combo.currentIndexChanged.connect(lambda _i: follow())
    follow()
    return note


def precision_choice(chosen: str) -> QComboBox:
    """The precisions (``engine.api.precision.PRECISIONS``) with their words and tips, ``chosen`` selected."""
    combo = QComboBox()
    for choice in PRECISIONS:
        combo.addItem(CHOICE_LABELS[choice], choice)
        combo.setItemData(combo.count() - 1, CHOICE_TIPS[choice], Qt.ItemDataRole.ToolTipRole)
    combo.setCurrentIndex(max(0, combo.findData(chosen)))
    return combo


class JobDialog(QDialog):
    """A dialog running one job at a time: ``progress`` and ``message`` (laid out by the
    subclass), ``close_button`` (the subclass adds it) reading Cancel while ``running``."""

    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.running = False
        self.progress = QProgressBar()
        self.progress.hide()
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button: QPushButton | None = None

    def _set_running(self, running: bool) -> None:
        self.running = running
        if self.close_button is not None:
            self.close_button.setText("Cancel" if running else "Close")
        self.progress.setVisible(running)

    def show_loading(self, stage: str, fraction: float, what: str = "the second model") -> None:
        """A load's ``stage`` (``fraction`` < 0: of unknown length, a busy bar)."""
        if fraction < 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(int(100 * fraction))
        self._say(f"Loading {what}: {escape(stage)}…")

    def show_refused(self, message: str) -> None:
        self._set_running(False)
        self._say(escape(message), REFUSED_COLOR)

    def _say(self, html: str, color: str | None = None) -> None:
        self.message.setText(f"<span style='color:{color}'>{html}</span>" if color else html)

    def _close_clicked(self) -> None:
        if self.running:
            self.cancel_requested.emit()  # Cancel: the dialog stays, to choose again
        else:
            self.reject()

    def reject(self) -> None:
        """Esc and the window's close button close the dialog, stopping a job that runs."""
        if self.running:
            self.cancel_requested.emit()
        super().reject()
