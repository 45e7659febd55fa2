"""Models → Draft model…: a smaller model with the running model's vocabulary that proposes a
few tokens at a time for the running model to check in one pass (speculative decoding).

The replies stay the running model's own, token for token; the draft decides how many tokens
one pass of the running model yields, and every token records what the draft proposed there
(the chat's colours by outcome, the inspector's Draft tab, the timeline's acceptance row).
The form: the draft's source, its precision and the tokens proposed per block; then the
load's progress (Cancel stops it), a refusal in the engine's words, or what is in use. The
dialog only shows; ``app.shell.draft_model`` runs the load and calls the ``show_*`` methods.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.model.draft import DraftChoice
from app.model.precision import CHOICE_LABELS, CHOICE_TIPS
from app.model.textfmt import escape
from app.views.file_dialogs import MODELS, Folders
from engine.api.draft import DEFAULT_DRAFT_TOKENS, MAX_DRAFT_TOKENS
from engine.api.precision import PRECISIONS

REFUSED_COLOR = "#b42318"
SOURCE_TIP = (
    "A smaller model of the same family, or another quantization of the same weights: a folder, "
    "a .gguf file, a Hugging Face repo id, or default. It must share the running model's vocabulary."
)
TOKENS_TIP = (
    "Tokens the draft proposes per block. More pays while the draft is often right; each "
    "rejected proposal costs the draft's pass for nothing."
)


class DraftModelDialog(QDialog):
    use_requested = Signal(object)  # DraftChoice
    release_requested = Signal()
    cancel_requested = Signal()

    def __init__(
        self,
        running: str,
        sources: list[str],
        current: DraftChoice | None,
        in_use: str = "",
        parent: QWidget | None = None,
        folders: Folders | None = None,
    ) -> None:
        """``running``: the running model's label; ``sources``: choices offered; ``current``:
        the draft saved for it (the form starts there); ``in_use``: the draft proposing now."""
        super().__init__(parent)
        self.folders = folders or Folders(None)
        self.setWindowTitle("Draft model")
        self.running = False
        layout = QVBoxLayout(self)
        intro = QLabel(
            f"A draft model proposes tokens for <b>{escape(running)}</b> to check in one pass. "
            "The replies stay its own, token for token; each token shows what the draft proposed."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.source = QComboBox()
        self.source.setEditable(True)
        self.source.addItems(list(dict.fromkeys([*([current.source] if current else []), *sources])))
        self.source.setToolTip(SOURCE_TIP)
        self.source.setMinimumContentsLength(36)
        pick = QHBoxLayout()
        pick.addWidget(self.source, 1)
        self.folder_button = QPushButton("Folder…")
        self.folder_button.clicked.connect(self._pick_folder)
        self.gguf_button = QPushButton("GGUF…")
        self.gguf_button.clicked.connect(self._pick_gguf)
        pick.addWidget(self.folder_button)
        pick.addWidget(self.gguf_button)
        form.addRow("Draft model", pick)
        self.precision = QComboBox()
        for choice in PRECISIONS:
            self.precision.addItem(CHOICE_LABELS[choice], choice)
            self.precision.setItemData(self.precision.count() - 1, CHOICE_TIPS[choice], Qt.ItemDataRole.ToolTipRole)
        self.precision.setCurrentIndex(max(0, self.precision.findData(current.precision if current else "auto")))
        form.addRow("Precision", self.precision)
        self.tokens = QSpinBox()
        self.tokens.setRange(1, MAX_DRAFT_TOKENS)
        self.tokens.setValue(current.tokens if current else DEFAULT_DRAFT_TOKENS)
        self.tokens.setToolTip(TOKENS_TIP)
        form.addRow("Tokens per block", self.tokens)
        layout.addLayout(form)
        self.progress = QProgressBar()
        self.progress.hide()
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.progress)
        layout.addWidget(self.message)
        layout.addStretch(1)
        buttons = QDialogButtonBox()
        self.release_button = buttons.addButton("No draft", QDialogButtonBox.ButtonRole.ResetRole)
        self.release_button.setToolTip("Decode without a draft from the next token (the choice is forgotten)")
        self.release_button.clicked.connect(self.release_requested.emit)
        self.use_button = buttons.addButton("Use draft", QDialogButtonBox.ButtonRole.AcceptRole)
        self.use_button.setDefault(True)
        self.use_button.clicked.connect(lambda: self.use_requested.emit(self.choice()))
        self.close_button = buttons.addButton(QDialogButtonBox.StandardButton.Close)
        self.close_button.clicked.connect(self._close_clicked)
        layout.addWidget(buttons)
        self.show_in_use(in_use)
        self.resize(560, 260)

    def choice(self) -> DraftChoice:
        return DraftChoice(self.source.currentText().strip(), self.precision.currentData(), self.tokens.value())

    def _pick_folder(self) -> None:
        folder = self.folders.open_folder(self, MODELS, "A draft model's folder")
        if folder:
            self.source.setCurrentText(folder)

    def _pick_gguf(self) -> None:
        path = self.folders.open_file(self, MODELS, "A draft model's GGUF file", "GGUF models (*.gguf)")
        if path:
            self.source.setCurrentText(path)

    # What the shell reports ----------------------------------------------------------------

    def _set_running(self, running: bool) -> None:
        self.running = running
        for widget in (self.source, self.precision, self.tokens, self.folder_button, self.gguf_button):
            widget.setEnabled(not running)
        self.use_button.setEnabled(not running)
        self.release_button.setEnabled(not running)
        self.close_button.setText("Cancel" if running else "Close")
        self.progress.setVisible(running)

    def show_started(self, choice: DraftChoice) -> None:
        self._set_running(True)
        self.progress.setRange(0, 0)
        self._say(f"Loading {escape(choice.source)} as the draft…")

    def show_loading(self, stage: str, fraction: float) -> None:
        if fraction < 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(int(100 * fraction))
        self._say(f"Loading the draft model: {escape(stage)}…")

    def show_in_use(self, words: str) -> None:
        self._set_running(False)
        self._say(escape(words) if words else "No draft: the running model decodes alone.")

    def show_refused(self, message: str) -> None:
        self._set_running(False)
        self._say(escape(message), REFUSED_COLOR)

    def show_cancelled(self) -> None:
        self._set_running(False)
        self._say("Cancelled: the draft in use (if any) is unchanged.")

    def _say(self, html: str, color: str | None = None) -> None:
        self.message.setText(f"<span style='color:{color}'>{html}</span>" if color else html)

    def _close_clicked(self) -> None:
        if self.running:
            self.cancel_requested.emit()
        else:
            self.reject()

    def reject(self) -> None:
        """Esc and the window's close button close the dialog, stopping a load that runs."""
        if self.running:
            self.cancel_requested.emit()
        super().reject()
