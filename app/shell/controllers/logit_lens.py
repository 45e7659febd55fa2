"""The logit lens, the GUI's end: the inspector's *Layers* tab, Models → Logit lens
of every token (the timeline's *decided at layer* row), and File → Export → This logit lens….

``LogitLensController`` (an :class:`app.shell.controllers.analysis_controller.AnalysisController`) owns
its action, the model layer's :class:`app.model.logit_lens.LogitLens` (what
was read, per reply and position, and why a reply cannot be read) and the
:class:`app.shell.engine_thread.lens_runner.LensRunner` moved to the engine's thread. The tab computes on
demand: while it is the inspector's tab in view and a token of a saved reply is selected,
the token's position is read unless it was already (then it shows at once), with a progress
bar and *Cancel*; the menu's job reads every token, its progress in the status bar (Esc
stops it), its row filling in as positions arrive. The runner's signals arrive on this
QObject's slots (queued onto the GUI thread) and go to the model layer, whose events update
the views; errors go to the tab and the status bar (and an error box for the menu's job).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Slot

from app.model.logit_lens import CANCELLED, RUNNING_EVERY, WAITS_FOR_REPLY, LensJob, LogitLens
from app.model.reply_analysis import Refusal
from app.shell.controllers.analysis_controller import AnalysisController
from app.shell.engine_thread.lens_runner import LensRunner
from app.store.export_lens import lens_records, write_lens
from app.views.file_dialogs import EXPORTS
from app.views.inspector import LAYERS_TAB
from app.views.lens_timeline import DecidedRow

if TYPE_CHECKING:
    from PySide6.QtWidgets import QDockWidget

    from app.shell.context import ShellContext
    from app.views.inspector import InspectorWidget
    from app.views.throttle import RedrawClock
    from app.views.timeline import TimelineWidget

ACTION_TEXT = "Logit lens of every token"
ACTION_TIP = (
    "Read every token of the selected reply through each layer of the running model: the layer "
    "each token was decided at, as a timeline row (the inspector's Layers tab shows one token)."
)
NOTHING_TO_EXPORT = "Nothing to export: select a token of a reply and open the inspector's Layers tab first."
REFRESH_MS = 100


class LogitLensController(AnalysisController):
    def __init__(
        self,
        context: ShellContext,
        timeline: TimelineWidget,
        inspector: InspectorWidget,
        inspector_dock: QDockWidget,
        clock: RedrawClock,
    ) -> None:
        self.lens = LogitLens(context.model.reading, context.in_use)
        super().__init__(context, self.lens, LensRunner(context.link.engine.worker))
        self.inspector = inspector
        self.runner.position_ready.connect(self._on_position)
        self.runner.finished.connect(self._on_finished)
        self.view = inspector.layers_view
        self.view.cancel_requested.connect(lambda: self.cancel(by_user=True))
        self.view.retry_requested.connect(self.retry)
        model = context.model
        self.row = DecidedRow(timeline, model.select_index)
        events = self.lens.events
        events.progressed.connect(self._show_progress)
        events.finished.connect(self._show_finished)
        events.failed.connect(self._show_failure)
        events.cancelled.connect(lambda job: self._hide_progress(job))
        self._refreshes = clock.throttler(self.refresh, REFRESH_MS)
        events.position.connect(lambda *_: self._refreshes.request())
        inspector.tabs.currentChanged.connect(lambda _: self.refresh())
        inspector_dock.visibilityChanged.connect(lambda _: self.refresh())
        model.events.selection_changed.connect(lambda _: self._refreshes.request(urgent=not model.follow_latest))
        for emitter in (model.events.entries_changed, model.events.conversation_changed, model.events.stream_renamed):
            emitter.connect(lambda *_: self._refreshes.request())
        self.action = self.add_action(ACTION_TEXT, self.read_every_token, ACTION_TIP, self.lens.every_unavailable)
        """Models → Logit lens of every token (the menu lays it out)."""

    # Starting and stopping ------------------------------------------------------------------------

    def read_every_token(self) -> LensJob | None:
        """Models → Logit lens of every token, for the selected reply; None (and why, in the
        status bar) when it cannot be."""
        if reason := self.lens.every_unavailable():
            self.context.status.show_message(f"Logit lens: {reason}", 8000)
            return None
        self.cancel()  # a token the Layers tab was reading: this job reads it too
        job = self._start(None)
        if job is not None:
            self._show_progress(0, job.total)
        return job

    def _start(self, positions: tuple[int, ...] | None) -> LensJob | None:
        job = self.lens.start(positions)
        if isinstance(job, Refusal):
            self.context.status.show_message(f"Logit lens: {job}", 8000)
            return None
        self.send(job)
        self.refresh()
        return job

    def cancel(self, by_user: bool = False) -> bool:
        """Stop the running job (the tab's Cancel, Esc, a model load); what it read stays.
        True if one was running."""
        job = self.lens.cancel(by_user)
        if job is None:
            return False
        self.stop(job)
        if by_user:
            self.context.status.show_message("Logit lens: cancelled.")
        self.refresh()
        return True

    def retry(self) -> None:
        """The tab's "Read the layers again" after a cancel or a failure."""
        selection = self.context.model.selection
        if selection is not None:
            self.lens.forget_declined(*selection)
        self.refresh()

    # The runner's signals (queued onto this thread) -----------------------------------------------

    @Slot(int, object, object)
    def _on_position(self, tag: int, row, texts: dict) -> None:
        self.lens.on_position(tag, row, texts)

    @Slot(int)
    def _on_finished(self, tag: int) -> None:
        self.lens.on_finished(tag)

    def _on_model_loaded(self, _info: Any) -> None:
        running = self.lens.running
        self.lens.clear()  # its numbers were the model's before
        if running is not None:
            self.stop(running)
        self.refresh()

    # The model layer's events ----------------------------------------------------------------------

    def _show_progress(self, done: int, total: int) -> None:
        job = self.lens.running
        if job is not None and job.every:
            first = "Logit lens: reading every token through the layers… (Esc stops)"
            self.show_progress(done, total, "lens", first if done == 0 else None)  # a job has a token at least

    def _hide_progress(self, job: LensJob) -> None:
        if job.every:
            self.hide_progress("")

    def _show_finished(self, job: LensJob) -> None:
        self._hide_progress(job)
        if job.every:
            selection = self.context.model.selection
            found = self.lens.of(selection[0]) if selection else None
            layers = f", {found.layers} layers" if found is not None else ""
            self.context.status.show_message(f"Logit lens: every token read ({job.total} tokens{layers}).", 10000)
        self.refresh()

    def _show_failure(self, job: LensJob, message: str) -> None:
        self._hide_progress(job)
        self.context.status.show_message(f"Logit lens: {message}", 10000)
        if job.every:  # asked for from the menu: said where it cannot be missed
            self.context.show_error(f"Logit lens: {message}", None)
        self.refresh()

    # The views -------------------------------------------------------------------------------------

    def tab_shown(self) -> bool:
        inspector = self.inspector
        return inspector.tabs.currentIndex() == LAYERS_TAB and inspector.isVisible()

    def refresh(self) -> None:
        """The timeline's row, and the Layers tab when it is in view (starting the selected
        token's read-out when nothing read it yet)."""
        found, _ = self.lens.selected()
        selection = self.context.model.selection
        self.row.show(found, selection[1] if selection is not None else None)
        if self.tab_shown():
            self._fill_tab()

    def _fill_tab(self) -> None:
        lens, view = self.lens, self.view
        if reason := lens.unavailable():
            view.show_message(reason)
            return
        stream, index = self.context.model.selection
        found, row = lens.selected()
        if row is not None:
            view.show_position(found, row)
            return
        if (why := lens.declined.get((stream, index))) is not None:
            view.show_message(f"Token {index}: {why}", error=why != CANCELLED, retry=True)
            return
        running = lens.running
        if running is not None and (running.every or lens.covers(stream, index)):
            done, total = lens.progress()
            if self.context.model.busy():  # the worker runs the job's pieces once the reply has ended
                view.show_busy(f"<b>Token {index}</b>: {WAITS_FOR_REPLY}", done, total or 1)
            elif not running.every:
                view.show_busy(f"<b>Token {index}</b>: reading it through every layer…", 0, 1)
            elif lens.covers(stream, index):
                view.show_busy(
                    f"<b>Token {index}</b>: reading every token of the reply through the layers…", done, total
                )
            else:
                view.show_busy(f"<b>Token {index}</b>: waiting. {RUNNING_EVERY}", done, total)
            return
        if running is not None:
            self.cancel()  # another token's read-out, no longer in view
        self._start((index,))

    # Export ----------------------------------------------------------------------------------------

    def export(self, path: str | None = None) -> Path | None:
        """Every position of the selected reply read so far: ``python -m engine lens``'s records."""
        found, _ = self.lens.selected()
        if found is None or not found.rows:
            self.context.status.show_message(NOTHING_TO_EXPORT, 8000)
            return None
        if path is None:
            path = self.context.folders.save_file(
                self.context.parent, EXPORTS, "Export the logit lens", "lens.jsonl", "JSON Lines (*.jsonl)"
            )
            if not path:
                return None
        written = write_lens(lens_records(found.ordered(), found.piece), path)
        self.context.status.show_message(f"Exported the logit lens of {len(found.rows)} tokens to {path}")
        return written
