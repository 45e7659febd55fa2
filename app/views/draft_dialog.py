"""Models → Draft model…: a smaller model with the running model's vocabulary that proposes a
few tokens at a time for the running model to check in one pass (speculative decoding).

The replies stay the running model's own, token for token; the draft decides how many tokens
one pass of the running model yields, and every token records what the draft proposed there
(the chat's colours by outcome, the inspector's Draft tab, the timeline's acceptance row).
The form: the draft's source, its precision and the tokens proposed per block; then the
load's progress (Cancel stops it), a refusal in the engine's words, or what is in use. The
dialog only shows; ``app.shell.controllers.draft_model`` runs the load and calls the ``show_*`` methods.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialogButtonBox, QFormLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from app.model.draft import DraftChoice
from app.model.textfmt import escape
from app.views.file_dialogs import Folders
from app.views.model_dialogs import JobDialog, SourcePicker, cpu_bfloat16_note, precision_choice
from engine.api.draft import DEFAULT_DRAFT_TOKENS, MAX_DRAFT_TOKENS

SOURCE_TIP = (
    "A smaller model of the same family, or another quantization of the same weights: a folder, "
    "a .gguf file, a Hugging Face repo id, or default. It must share the running model's vocabulary."
)
TOKENS_TIP = (
    "Tokens the draft proposes per block. More pays while the draft is often right; each "
    "rejected proposal costs the draft's pass for nothing."
)


class DraftModelDialog(JobDialog):
    use_requested = Signal(object)  # DraftChoice
    release_requested = Signal()

    def __init__(
        self,
        running: str,
        sources: list[str],
        current: DraftChoice | None,
        in_use: str = "",
        parent: QWidget | None = None,
        folders: Folders | None = None,
        device: str = "",
    ) -> None:
        """``running``: the running model's label; ``sources``: choices offered; ``current``:
        the draft saved for it (the form starts there); ``in_use``: the draft proposing now;
        ``device``: MLX's (``ModelInfo.device``: on ``cpu``, bfloat16 is said to be slow)."""
        super().__init__(parent)
        self.setWindowTitle("Draft model")
        layout = QVBoxLayout(self)
        intro = QLabel(
            f"A draft model proposes tokens for <b>{escape(running)}</b> to check in one pass. "
            "The replies stay its own, token for token; each token shows what the draft proposed."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        offered = list(dict.fromkeys([*([current.source] if current else []), *sources]))
        self.picker = SourcePicker(offered, SOURCE_TIP, folders or Folders(None), "for the draft")
        self.source = self.picker.combo
        form.addRow("Draft model", self.picker)
        self.precision = precision_choice(current.precision if current else "auto")
        form.addRow("Precision", self.precision)
        self.slow_note = cpu_bfloat16_note(self.precision, device)
        form.addRow(self.slow_note)
        self.tokens = QSpinBox()
        self.tokens.setRange(1, MAX_DRAFT_TOKENS)
        self.tokens.setValue(current.tokens if current else DEFAULT_DRAFT_TOKENS)
        self.tokens.setToolTip(TOKENS_TIP)
        form.addRow("Tokens per block", self.tokens)
        layout.addLayout(form)
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
        return DraftChoice(self.picker.text(), self.precision.currentData(), self.tokens.value())

    # What the shell reports ----------------------------------------------------------------

    def _set_running(self, running: bool) -> None:
        super()._set_running(running)
        self.picker.set_running(running)
        for widget in (self.precision, self.tokens, self.use_button, self.release_button):
            widget.setEnabled(not running)

    def show_started(self, choice: DraftChoice) -> None:
        self._set_running(True)
        self.progress.setRange(0, 0)
        self._say(f"Loading {escape(choice.source)} as the draft…")

    def show_in_use(self, words: str) -> None:
        self._set_running(False)
        self._say(escape(words) if words else "No draft: the running model decodes alone.")

    def show_cancelled(self) -> None:
        self._set_running(False)
        self._say("Cancelled: the draft in use (if any) is unchanged.")
