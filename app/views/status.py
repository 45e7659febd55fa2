"""The status bar's permanent widgets: the model, the last reply's speed, memory, progress.

The model's label gives way first in a narrow window, shortest last: a server's keeps
``server reports: <stage>`` whole (``app.model.remote_labels.label_forms``), the rest of it
in its tooltip.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar

from app.model.remote_labels import label_forms
from app.views.fitting import FittedLabel
from engine.events import Finished

STOPPING = "Stopping…"


class StatusWidgets:
    def __init__(self, bar: QStatusBar) -> None:
        self.bar = bar
        self.model_label = FittedLabel("No model")
        self.speed_label = QLabel("")
        self.memory_label = QLabel("")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setRange(0, 100)
        self.progress.setTextVisible(True)
        self.progress.hide()
        for widget in (self.model_label, self.speed_label, self.progress, self.memory_label):
            bar.addPermanentWidget(widget)

    def show_message(self, text: str, ms: int = 4000) -> None:
        self.bar.showMessage(text, ms)

    def loading(self, source: str) -> None:
        self.model_label.setText(f"Loading {source}…")
        self._set_fraction(0.0)
        self.progress.show()

    def model_progressed(self, stage: str, fraction: float) -> None:
        """``fraction`` < 0: a stage of unknown length (a busy bar, no number)."""
        self._set_fraction(fraction)
        self.bar.showMessage(f"Model: {stage}…")

    def _set_fraction(self, fraction: float) -> None:
        if fraction < 0:
            self.progress.setRange(0, 0)  # Qt draws an indeterminate (busy) bar
            self.progress.setFormat("loading")
            return
        self.progress.setRange(0, 100)
        self.progress.setFormat("loading %p%")
        self.progress.setValue(int(fraction * 100))

    def model_ready(self, name: str, message: str = "") -> None:
        self.model_label.set_forms(label_forms(name))
        self.progress.hide()
        if message:
            self.bar.showMessage(message, 4000)
        else:
            self.bar.clearMessage()

    def model_failed(self, label: str, message: str) -> None:
        """A load failed: the label of the model still in use, and no stale "Model: <stage>…"."""
        self.model_ready(label, message)

    def stopping(self) -> None:
        """Esc or Stop: said at once; the reply ends between two prefill chunks or tokens."""
        self.bar.showMessage(STOPPING)
        self.progress.setFormat(STOPPING)

    def stopped(self) -> None:
        """No reply is running any more: the "Stopping…" has done its work."""
        if self.bar.currentMessage() == STOPPING:
            self.bar.clearMessage()
        if self.progress.format() == STOPPING:
            self.progress.setFormat("")

    def prefill_progressed(self, _tag: int, done: int, total: int) -> None:
        if done >= total:
            self.progress.hide()
            return
        if self.progress.format() != STOPPING:
            self.progress.setFormat(f"prefill {done}/{total}")
        self.progress.setRange(0, 100)
        self.progress.setValue(int(100 * done / max(total, 1)))
        self.progress.show()

    def reply_finished(self, finished: Finished) -> None:
        self.progress.hide()
        # A compare column that shared another's prefill has no prompt speed of its own.
        prompt = f"prompt {finished.prompt_tps:.1f} tok/s · " if (finished.prompt_tps or 0) > 0 else ""
        self.speed_label.setText(f"{prompt}generation {finished.generation_tps:.1f} tok/s")

    def memory_measured(self, nbytes: int) -> None:
        self.memory_label.setText(f"memory {nbytes / 2**20:.0f} MiB")
