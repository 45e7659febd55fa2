"""Models → Check precision…: the selected reply teacher-forced in the running precision and
in float32 (``EngineSession.check_fidelity``), on the engine's thread, then a dialog.

The check runs on the engine's thread
(``app.shell.engine_thread.fidelity_runner.FidelityRunner``). ``PrecisionCheck`` is its GUI-thread end (an
:class:`app.shell.controllers.analysis_controller.AnalysisController` of the model layer's
:class:`app.model.precision_check.PrecisionChecks`): its action, the progress in the status
bar, Esc to stop, errors in a dialog, the result in ``app.views.precision_dialog``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.model.precision_check import ALREADY_FLOAT32, FidelityCheck, PrecisionChecks, PrecisionJob
from app.model.reply_analysis import Refusal
from app.shell.controllers.analysis_controller import AnalysisController
from app.shell.engine_thread.fidelity_runner import FidelityRunner

if TYPE_CHECKING:
    from app.shell.context import ShellContext

ACTION_TEXT = "Check precision…"
ACTION_TIP = "Compare the selected reply's logprobs in this precision with float32's, token by token."
FLOAT32_TEXT = "Check precision… (already float32: choose float16 in Precision above)"
"""The item's text while the model computes in float32: greyed out, the reason must show
without a hover (its tooltip says it whole, ``ALREADY_FLOAT32``)."""


def action_text(why: str) -> str:
    """The menu item's text for the reason it is disabled ("": its own)."""
    return FLOAT32_TEXT if why == ALREADY_FLOAT32 else ""


class PrecisionCheck(AnalysisController):
    """The GUI's end: its action (``action``), starting, stopping, and the answer."""

    def __init__(self, context: ShellContext, switch_precision: Callable[[str], None]) -> None:
        self.checks = PrecisionChecks(context.model.reading, context.in_use)
        super().__init__(context, self.checks, FidelityRunner(context.link.engine.worker))
        self._switch_precision = switch_precision
        self.dialog = None
        self.runner.progressed.connect(self._on_progressed)
        self.runner.finished.connect(self._on_finished)
        events = self.checks.events
        events.progressed.connect(lambda done, total: self._show_progress(done, total))
        events.finished.connect(self._show_result)
        events.failed.connect(self._show_failure)
        self.action = self.add_action(ACTION_TEXT, self.start, ACTION_TIP, self.checks.unavailable, action_text)
        """Models → Check precision… (the Precision menu lays it out)."""

    @property
    def running(self) -> PrecisionJob | None:
        return self.checks.running

    def unavailable(self) -> str:
        """Why the selected reply cannot be checked now ("" when it can)."""
        return self.checks.unavailable()

    def start(self) -> PrecisionJob | None:
        job = self.checks.start()
        if isinstance(job, Refusal):
            self.context.status.show_message(f"Check precision: {job}", 8000)
            return None
        self._show_progress(0, len(job.output))
        self.send(job)
        return job

    def cancel(self) -> bool:
        """Stop a running check (Esc, Chat → Stop, a model load); True if one was running."""
        job = self.checks.cancel()
        if job is None:
            return False
        self.stop(job)
        self.hide_progress("Precision check stopped.")
        return True

    def _show_progress(self, done: int, total: int) -> None:
        # A checked reply has a token at least (the model layer refuses one without).
        self.show_progress(done, total, "precision", "Checking precision against float32… (Esc stops)")

    def _show_result(self, check: FidelityCheck) -> None:
        self.hide_progress(f"Precision checked: {len(check.rows)} tokens.")
        from app.views.precision_dialog import PrecisionDialog

        self.dialog = PrecisionDialog(check.summary, list(check.rows), list(check.pieces), self.context.parent)
        self.dialog.switch_requested.connect(self._switch_precision)
        self.dialog.open()

    def _show_failure(self, _job: PrecisionJob, message: str) -> None:
        self.hide_progress("The precision check failed.")
        self.context.show_error(f"The precision check failed.\n\n{message}", None)

    def _on_model_loaded(self, _info: Any) -> None:
        self.cancel()  # its numbers would be of the model loaded before
