"""Models → Compare models…: the selected reply (or scored text) under the running model and
a second one, token by token.

``CompareModels`` is the GUI thread's end: it owns the model layer's
:class:`app.model.model_compare.ModelComparisons` (the comparisons, and why a reply cannot
be compared), the :class:`app.shell.compare_runner.CompareRunner` moved to the engine's
thread, the dialog (``app.views.compare_dialog``), the timeline's KLD row
(``app.views.kld_timeline``), the inspector's *Models* tab (``app.views.compare_tokens``)
and a status-bar label holding the selected reply's summary line. The runner's signals
arrive on this QObject's slots (queued onto the GUI thread) and go to the model layer,
whose events update the dialog and the status bar.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QMenu

from app.model.model_compare import CompareJob, CompareSettings, Comparison, ModelComparisons
from app.model.precision import model_label
from app.shell.compare_runner import CompareRunner
from app.shell.worker import describe
from app.views.compare_dialog import CompareModelsDialog
from app.views.file_dialogs import EXPORTS
from app.views.kld_timeline import KldRow

if TYPE_CHECKING:
    from app.shell.window import MainWindow

ACTION_TIP = "The selected reply under the running model and a second one: KL divergence per token."
NOTHING_TO_EXPORT = "Nothing to export: compare a reply first (Models → Compare models…) and select one of its tokens."


class CompareModels(QObject):
    request_start = Signal(object)  # CompareJob
    request_cancel = Signal(int)
    request_release = Signal()

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.comparisons = ModelComparisons(window.model, window.in_use)
        self.dialog: CompareModelsDialog | None = None
        self.last: Comparison | None = None  # the last one finished (the dialog exports it)
        self._shown: tuple = ()  # what refresh drew last
        engine = window.engine
        self.runner = CompareRunner(engine.worker)
        self.runner.moveToThread(engine.thread)
        self.request_start.connect(self.runner.start)
        self.request_cancel.connect(self.runner.cancel)
        self.request_release.connect(self.runner.release)
        self.runner.loading.connect(self._on_loading)
        self.runner.loaded.connect(self._on_loaded)
        self.runner.progressed.connect(self._on_progressed)
        self.runner.finished.connect(self._on_finished)
        self.runner.failed.connect(self._on_failed)
        engine.worker.model_loaded.connect(self._on_model_loaded)
        events = self.comparisons.events
        events.loading.connect(self._show_loading)
        events.loaded.connect(self._show_loaded)
        events.progressed.connect(self._show_progress)
        events.finished.connect(self._show_result)
        events.failed.connect(self._show_failure)
        self.kld_row = KldRow(window.timeline, window.model.select_index)
        self.summary_label = QLabel("")
        window.statusBar().addPermanentWidget(self.summary_label)
        for name in ("selection_changed", "entries_changed", "conversation_changed"):
            getattr(window.model.events, name).connect(lambda *_: self.refresh())

    def unavailable(self) -> str:
        return self.comparisons.unavailable()

    # The dialog ------------------------------------------------------------------------------

    def open_dialog(self) -> CompareModelsDialog | None:
        """The dialog for the selected reply; None (and why, in the status bar) when it cannot be."""
        if reason := self.unavailable():
            self.window.status.show_message(f"Compare models: {reason}", 8000)
            return None
        info = self.window.model_info
        running = self.window.model_source or "default"
        from app.shell.model_loading import recent_models

        sources = list(dict.fromkeys([running, "default", *recent_models(self.window.settings)]))
        # The usual question: the same model in the other precision (float16 beside float32).
        precision = "float16" if info.precision == "float32" else "float32"
        label = model_label(info)
        if self.dialog is not None:  # one at a time (nothing runs: unavailable() says so)
            self.dialog.close()
            self.dialog.deleteLater()
        self.dialog = CompareModelsDialog(
            label, sources, precision, self.window, running_precision=info.precision, folders=self.window.folders
        )
        self.dialog.compare_requested.connect(self.start)
        self.dialog.cancel_requested.connect(self.cancel)
        self.dialog.export_requested.connect(lambda: self.export(self.last))
        self.dialog.open()
        return self.dialog

    def start(self, settings: CompareSettings) -> CompareJob | None:
        job = self.comparisons.start(settings)
        if isinstance(job, str):
            self._show_failure(job)
            return None
        if self.dialog is not None:
            self.dialog.show_started(settings)
        waits = "Waiting for the reply being written, then loading" if self.window.busy() else "Loading"
        self._status_progress(0, 0, f"{waits} {settings.words()} to compare… (Esc stops)")
        collect_here()
        self.request_start.emit(job)
        return job

    def cancel(self) -> bool:
        """Stop a running comparison (the dialog's Cancel, Esc, a model load): its result is
        dropped and the second model released. True if one was running."""
        job = self.comparisons.cancel()
        if job is None:
            return False
        collect_here()
        self.request_cancel.emit(job.tag)
        self.window.status.progress.hide()
        self.window.status.show_message("Compare models: cancelled.")
        if self.dialog is not None:
            self.dialog.show_cancelled()
        return True

    # The runner's signals (queued onto this thread) -------------------------------------------

    @Slot(int, str, float)
    def _on_loading(self, tag: int, stage: str, fraction: float) -> None:
        self.comparisons.on_loading(tag, stage, fraction)

    @Slot(int, object)
    def _on_loaded(self, tag: int, second) -> None:
        self.comparisons.on_loaded(tag, second)

    @Slot(int, int, int)
    def _on_progressed(self, tag: int, done: int, total: int) -> None:
        self.comparisons.on_progress(tag, done, total)

    @Slot(int, object, object)
    def _on_finished(self, tag: int, rows: list, texts: dict) -> None:
        self.comparisons.on_finished(tag, rows, texts)

    @Slot(int, object)
    def _on_failed(self, tag: int, exc: BaseException) -> None:
        self.comparisons.on_failed(tag, describe(exc))

    def _on_model_loaded(self, _info) -> None:
        self.cancel()  # its numbers would be of the model loaded before
        collect_here()
        self.request_release.emit()  # and the second model may not share the new one's vocabulary

    # The model layer's events -------------------------------------------------------------------

    def _status_progress(self, done: int, total: int, message: str | None = None) -> None:
        progress = self.window.status.progress
        if total <= 0:
            progress.setRange(0, 0)  # busy: the load's length is not known
            progress.setFormat("compare: loading")
        else:
            progress.setRange(0, 100)
            progress.setValue(int(100 * done / total))
            progress.setFormat(f"compare {done}/{total}")
        progress.show()
        if message:
            self.window.status.show_message(message, 0)

    def _show_loading(self, stage: str, fraction: float) -> None:
        if self.dialog is not None:
            self.dialog.show_loading(stage, fraction)

    def _show_loaded(self, second) -> None:
        self._status_progress(0, 1, f"Comparing with {second.label}… (Esc stops)")
        if self.dialog is not None:
            self.dialog.show_loaded(second.label)

    def _show_progress(self, done: int, total: int) -> None:
        self._status_progress(done, total)
        if self.dialog is not None:
            self.dialog.show_progress(done, total)

    def _show_result(self, comparison: Comparison) -> None:
        self.last = comparison
        self.window.status.progress.hide()
        self.window.status.show_message(f"Compared: {comparison.summary_line()}", 15000)
        if self.dialog is not None:
            self.dialog.show_result(comparison)
        self.refresh(bring_forward=True)

    def _show_failure(self, message: str) -> None:
        """A refusal or a failure: in the dialog when it is open, else an error box."""
        self.window.status.progress.hide()
        self.window.status.show_message(f"Compare models: {message}", 10000)
        if self.dialog is not None and self.dialog.isVisible():
            self.dialog.show_refused(message)
        else:
            self.window.show_error(f"Compare models: {message}")

    # The views --------------------------------------------------------------------------------

    def refresh(self, bring_forward: bool = False) -> None:
        """The timeline row, the inspector tab and the summary line for the selection (redrawn
        only when they change: the model's events come often while a reply streams)."""
        found = self.comparisons.selected()
        comparison, row = found if found is not None else (None, None)
        selection = self.window.model.selection
        shown = (id(comparison), id(row), selection[1] if comparison is not None else None)
        if shown == self._shown and not bring_forward:
            return
        self._shown = shown
        self.kld_row.show(comparison, selection[1] if selection is not None else None)
        self.window.inspector.show_models(comparison, row, bring_forward)
        line = comparison.summary_line() if comparison is not None else ""
        self.summary_label.setText(line)
        self.summary_label.setToolTip(line)
        self.summary_label.setVisible(bool(line))

    # Export -----------------------------------------------------------------------------------

    def export(self, comparison: Comparison | None = None, path: str | None = None) -> Path | None:
        """The per-token records and the summary (JSON Lines, or CSV by the suffix): of
        ``comparison``, else of the selected reply's."""
        from app.store.export_compare import write_compare

        found = self.comparisons.selected()
        comparison = comparison or (found[0] if found is not None else None)
        if comparison is None:
            self.window.status.show_message(NOTHING_TO_EXPORT, 8000)
            return None
        if path is None:
            path = self.window.folders.save_file(
                self.window, EXPORTS, "Export the comparison", "compare.jsonl", "JSON Lines (*.jsonl);;CSV (*.csv)"
            )
            if not path:
                return None
        write_compare(comparison.records(), path)
        self.window.status.show_message(f"Exported the comparison to {path}")
        return Path(path)


def collect_here() -> None:
    """A full garbage collection on the GUI thread, just before the engine's thread is asked
    to load or release a second model: ``release_second`` collects there (to free the
    weights at once), and a Qt object collected on that thread while the GUI thread deletes
    another can deadlock the two (docs/ARCHITECTURE.md, Known pitfalls). Collected here
    first, no Qt garbage is left for it to find."""
    gc.collect()


def add_compare_action(window: MainWindow, menu: QMenu) -> QAction:
    """Models → Compare models…, enabled when the selected reply can be compared (its
    tooltip says why not, a server's reason included), checked each time the menu opens."""
    action = QAction("Compare models…", window)
    action.triggered.connect(lambda _=False: window.compare_models.open_dialog())
    menu.addAction(action)
    menu.aboutToShow.connect(lambda: update_compare_action(window, action))
    return action


def update_compare_action(window: MainWindow, action: QAction) -> None:
    controller = getattr(window, "compare_models", None)  # made once the worker is
    reason = controller.unavailable() if controller is not None else "No model is loaded."
    action.setEnabled(not reason)
    action.setToolTip(reason or ACTION_TIP)
    action.setStatusTip(reason or ACTION_TIP)
