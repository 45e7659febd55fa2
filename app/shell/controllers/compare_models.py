"""Models → Compare models…: the selected reply (or scored text) under the running model and
a second one, token by token.

``CompareModels`` is the GUI thread's end (an
:class:`app.shell.controllers.analysis_controller.AnalysisController`): it owns its action, the model layer's
:class:`app.model.model_compare.ModelComparisons` (the comparisons, and why a reply cannot
be compared), the :class:`app.shell.engine_thread.compare_runner.CompareRunner` moved to the engine's
thread, the dialog (``app.views.compare_dialog``), the timeline's KLD row
(``app.views.kld_timeline``), the inspector's *Models* tab (``app.views.compare_tokens``)
and a status-bar label holding the selected reply's summary line. The runner's signals
arrive on this QObject's slots (queued onto the GUI thread) and go to the model layer,
whose events update the dialog and the status bar.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QLabel

from app.model.model_compare import CompareJob, CompareSettings, Comparison, ModelComparisons
from app.model.precision import model_label
from app.model.reply_analysis import Refusal
from app.shell.controllers.analysis_controller import AnalysisController
from app.shell.engine_thread.compare_runner import CompareRunner
from app.views.compare_dialog import CompareModelsDialog
from app.views.file_dialogs import EXPORTS
from app.views.kld_timeline import KldRow

if TYPE_CHECKING:
    from app.shell.context import ShellContext
    from app.views.inspector import InspectorWidget
    from app.views.timeline import TimelineWidget

ACTION_TIP = "The selected reply under the running model and a second one: KL divergence per token."
NOTHING_TO_EXPORT = "Nothing to export: compare a reply first (Models → Compare models…) and select one of its tokens."


class CompareModels(AnalysisController):
    request_release = Signal()

    def __init__(
        self,
        context: ShellContext,
        timeline: TimelineWidget,
        inspector: InspectorWidget,
        recent: Callable[[], list[str]],
    ) -> None:
        """``recent``: the models loaded lately (the dialog offers them)."""
        self.comparisons = ModelComparisons(context.model.reading, context.in_use)
        super().__init__(context, self.comparisons, CompareRunner(context.link.engine.worker))
        self.inspector, self._recent = inspector, recent
        self.dialog: CompareModelsDialog | None = None
        self.last: Comparison | None = None  # the last one finished (the dialog exports it)
        self._shown: tuple = ()  # what refresh drew last
        self._second_asked = False  # a comparison was sent since the last release: a second model may be held
        self.request_release.connect(self.runner.release)
        self.runner.loading.connect(self._on_loading)
        self.runner.loaded.connect(self._on_loaded)
        self.runner.progressed.connect(self._on_progressed)
        self.runner.finished.connect(self._on_finished)
        events = self.comparisons.events
        events.loading.connect(self._show_loading)
        events.loaded.connect(self._show_loaded)
        events.progressed.connect(self._show_progress)
        events.finished.connect(self._show_result)
        events.failed.connect(lambda _job, message: self._show_failure(message))
        self.kld_row = KldRow(timeline, context.model.select_index)
        self.summary_label = QLabel("")
        context.status.bar.addPermanentWidget(self.summary_label)
        changes = context.model.events
        for emitter in (changes.selection_changed, changes.entries_changed, changes.conversation_changed):
            emitter.connect(lambda *_: self.refresh())
        self.action = self.add_action("Compare models…", self.open_dialog, ACTION_TIP, self.unavailable)
        """Models → Compare models… (the menu lays it out)."""

    def unavailable(self) -> str:
        return self.comparisons.unavailable()

    # The dialog ------------------------------------------------------------------------------

    def open_dialog(self) -> CompareModelsDialog | None:
        """The dialog for the selected reply; None (and why, in the status bar) when it cannot be."""
        if reason := self.unavailable():
            self.context.status.show_message(f"Compare models: {reason}", 8000)
            return None
        info = self.context.in_use.info
        running = self.context.in_use.source or "default"
        sources = list(dict.fromkeys([running, "default", *self._recent()]))
        # The usual question: the same model in the other precision (float16 beside float32).
        precision = "float16" if info.precision == "float32" else "float32"
        label = model_label(info)
        if self.dialog is not None:  # one at a time (nothing runs: unavailable() says so)
            self.dialog.close()
            self.dialog.deleteLater()
        self.dialog = CompareModelsDialog(
            label,
            sources,
            precision,
            self.context.parent,
            running_precision=info.precision,
            folders=self.context.folders,
            device=info.device,
        )
        self.dialog.compare_requested.connect(self.start)
        self.dialog.cancel_requested.connect(self.cancel)
        self.dialog.export_requested.connect(lambda: self.export(self.last))
        self.dialog.open()
        return self.dialog

    def start(self, settings: CompareSettings) -> CompareJob | None:
        job = self.comparisons.start(settings)
        if isinstance(job, Refusal):
            self._show_failure(job.why)
            return None
        if self.dialog is not None:
            self.dialog.show_started(settings)
        waits = "Waiting for the reply being written, then loading" if self.context.model.busy() else "Loading"
        self._status_progress(0, 0, f"{waits} {settings.words()} to compare… (Esc stops)")
        collect_here()
        self._second_asked = True
        self.send(job)
        return job

    def cancel(self) -> bool:
        """Stop a running comparison (the dialog's Cancel, Esc, a model load): its result is
        dropped and the second model released. True if one was running."""
        job = self.comparisons.cancel()
        if job is None:
            return False
        collect_here()
        self.stop(job)
        self.hide_progress("Compare models: cancelled.")
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

    def _on_model_loaded(self, _info: Any) -> None:
        # Another model, precision or backend: a running comparison's numbers and the ones
        # found would be the model's before (the lens clears its own alike); the summary line
        # goes with them rather than squeezing the new model's label in the status bar.
        self.cancel()
        self.comparisons.clear()
        self.refresh()
        # Only a second model the engine's thread may hold needs the collection first: none
        # was asked for since the last release (every window's first load, 0.1 s each).
        if self._second_asked:
            collect_here()
        self._second_asked = False
        self.request_release.emit()  # and the second model may not share the new one's vocabulary

    # The model layer's events -------------------------------------------------------------------

    def _status_progress(self, done: int, total: int, message: str | None = None) -> None:
        self.show_progress(done, total, "compare", message or None)

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
        self.hide_progress(f"Compared: {comparison.summary_line()}", 15000)
        if self.dialog is not None:
            self.dialog.show_result(comparison)
        self.refresh(bring_forward=True)

    def _show_failure(self, message: str) -> None:
        """A refusal or a failure: in the dialog when it is open, else an error box."""
        self.hide_progress(f"Compare models: {message}", 10000)
        if self.dialog is not None and self.dialog.isVisible():
            self.dialog.show_refused(message)
        else:
            self.context.show_error(f"Compare models: {message}", None)

    # The views --------------------------------------------------------------------------------

    def refresh(self, bring_forward: bool = False) -> None:
        """The timeline row, the inspector tab and the summary line for the selection (redrawn
        only when they change: the model's events come often while a reply streams)."""
        comparison, row = self.comparisons.selected()
        selection = self.context.model.selection
        shown = (id(comparison), id(row), selection[1] if comparison is not None else None)
        if shown == self._shown and not bring_forward:
            return
        self._shown = shown
        self.kld_row.show(comparison, selection[1] if selection is not None else None)
        self.inspector.show_models(comparison, row, bring_forward)
        line = comparison.summary_line() if comparison is not None else ""
        self.summary_label.setText(line)
        self.summary_label.setToolTip(line)
        self.summary_label.setVisible(bool(line))

    # Export -----------------------------------------------------------------------------------

    def export(self, comparison: Comparison | None = None, path: str | None = None) -> Path | None:
        """The per-token records and the summary (JSON Lines, or CSV by the suffix): of
        ``comparison``, else of the selected reply's."""
        from app.store.export_compare import write_compare

        comparison = comparison or self.comparisons.selected()[0]
        if comparison is None:
            self.context.status.show_message(NOTHING_TO_EXPORT, 8000)
            return None
        if path is None:
            path = self.context.folders.save_file(
                self.context.parent,
                EXPORTS,
                "Export the comparison",
                "compare.jsonl",
                "JSON Lines (*.jsonl);;CSV (*.csv)",
            )
            if not path:
                return None
        write_compare(comparison.records(), path)
        self.context.status.show_message(f"Exported the comparison to {path}")
        return Path(path)


def collect_here() -> None:
    """A full garbage collection on the GUI thread, just before the engine's thread is asked
    to load or release a second model: ``release_second`` collects there (to free the
    weights at once), and a Qt object collected on that thread while the GUI thread deletes
    another can deadlock the two (docs/ARCHITECTURE.md, Known pitfalls). Collected here
    first, no Qt garbage is left for it to find."""
    gc.collect()
