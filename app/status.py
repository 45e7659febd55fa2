"""The status bar's permanent widgets: the model, the last reply's speed, memory, progress."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar

from engine.events import Finished


class StatusWidgets:
    def __init__(self, bar: QStatusBar) -> None:
        self.bar = bar
        self.model_label = QLabel("No model")
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
        self.progress.setFormat("loading %p%")
        self.progress.setValue(0)
        self.progress.show()

    def model_progressed(self, stage: str, fraction: float) -> None:
        self.progress.setValue(int(fraction * 100))
        self.bar.showMessage(f"Model: {stage}…")

    def model_ready(self, name: str, message: str = "") -> None:
        self.model_label.setText(name)
        self.progress.hide()
        if message:
            self.bar.showMessage(message, 4000)

    def prefill_progressed(self, _tag: int, done: int, total: int) -> None:
        if done >= total:
            self.progress.hide()
            return
        self.progress.setFormat(f"prefill {done}/{total}")
        self.progress.setValue(int(100 * done / max(total, 1)))
        self.progress.show()

    def reply_finished(self, finished: Finished) -> None:
        self.progress.hide()
        # A compare column that shared another's prefill has no prompt speed of its own.
        prompt = f"prompt {finished.prompt_tps:.1f} tok/s · " if finished.prompt_tps > 0 else ""
        self.speed_label.setText(f"{prompt}generation {finished.generation_tps:.1f} tok/s")

    def memory_measured(self, nbytes: int) -> None:
        self.memory_label.setText(f"memory {nbytes / 2**20:.0f} MiB")
