"""Score text, replay under new settings, exports and imports, plot exports: the controller
that wires them (its File and Chat actions are ``app/shell/score_actions.py``'s). The work is the model
layer's (:class:`app.model.scoring.Scoring`); what is shown, the views'
(``app/views/score_views.py``); this module forwards the worker's events to the one and the
results to the other.

- File → Score text…: paste or open a .txt/.md file (optionally as the assistant's reply to
  a prompt); the text becomes a scored reply in a new conversation (app.model.scored), the
  perplexity goes to the status bar. Esc / Stop cancels it between chunks.
- Chat → Replay under the current settings: the selected saved reply re-scored under the
  sampling panel's settings; the timeline overlays the chosen token's new probability,
  the positions they would have removed it (✕) and where their most likely token differs
  (▲); Chat → Branch at the first change continues the reply from there with that token.
- File → Export…: the reply, the conversation, the compare run or the scored text shown, to
  JSON Lines or CSV (app.store.export); the timeline or inspector as PNG or SVG.
- File → Open export…: a JSON Lines export, copied into a new conversation (the file is
  never written), inspectable, scorable and continuable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QAbstractButton, QWidget

from app.model.reply_analysis import Refusal
from app.model.scoring import EXPORT_NEEDS, NO_REPLAY, Scoring, replay_words, score_words
from app.shell.context import ShellContext
from app.views.file_dialogs import EXPORTS, PLOTS
from app.views.fitting import FittedLabel
from app.views.inspector import InspectorWidget
from app.views.plot_export import save_plot
from app.views.sampling_panel import SamplingPanel
from app.views.score_views import ReplayOverlay, SurprisalRow
from app.views.throttle import RedrawClock
from app.views.timeline import TimelineWidget
from engine.api.events import ScoreDone, TokenStep


@dataclass(frozen=True)
class ScoreParts:
    """What scoring needs of the window besides the context: the views it draws on, the
    panel's settings, the colour switch, the redraw clock, and the window's own way to open
    a conversation and to load a model."""

    timeline: TimelineWidget
    inspector: InspectorWidget
    panel: SamplingPanel
    color_toggle: QAbstractButton
    clock: RedrawClock
    open_conversation: Callable[[int], None]
    load: Callable[[str], None]


class ScoreController(QObject):
    """One per window, made at its first use (``ScoreActions.controller()``)."""

    def __init__(self, context: ShellContext, parts: ScoreParts, scoring: Scoring) -> None:
        super().__init__(context.parent)
        self.context, self.parts = context, parts
        self.status = context.status
        self.scoring = scoring
        self.perplexity_label = FittedLabel("")  # the perplexity alone where the bar is narrow
        context.status.bar.addPermanentWidget(self.perplexity_label)
        worker = context.link.engine.worker
        worker.score_finished.connect(self._on_score_finished)
        worker.token_sampled.connect(self._on_token)
        worker.job_finished.connect(self._on_job_finished)
        self.overlay = ReplayOverlay(parts.timeline)
        self.surprisal = SurprisalRow(parts.timeline)
        events = context.model.events
        events.selection_changed.connect(self._on_selection)
        # A scored text's figures are its conversation's and its model's: gone with either.
        # Scoring switches the colours on to show the scored text; that is not the person's
        # choice: it goes with the conversation (it stayed on for every later chat) and is
        # not saved, unless they touch the switch themselves meanwhile.
        self.colour_forced = False
        parts.color_toggle.toggled.connect(self._on_colour_toggled)
        events.conversation_changed.connect(self._on_conversation)
        worker.model_loaded.connect(self._clear_figures)  # a slot of this object: queued to the GUI thread
        for name in ("selection_changed", "entries_changed", "stream_renamed"):
            getattr(events, name).connect(lambda *_: self.draw_surprisal())
        self._surprisal_redraws = parts.clock.throttler(self.draw_surprisal, 200)
        events.tokens_added.connect(lambda *_: self._surprisal_redraws.request())

    # What the tests and the screenshot tool look at.
    last_done = property(lambda self: self.scoring.last_done)
    result = property(lambda self: self.scoring.result)
    replay = property(lambda self: self.scoring.replay)
    overlay_prob = property(lambda self: self.overlay.prob)
    surprisal_plot = property(lambda self: self.surprisal.plot)
    surprisal_curve = property(lambda self: self.surprisal.curve)

    # Score text ------------------------------------------------------------------------------

    @Slot(object)
    def _clear_figures(self, _what=None) -> None:
        self.perplexity_label.setText("")

    def _show_figures(self, text: str) -> None:
        """A scored text's figures; in a narrow status bar its perplexity alone."""
        self.perplexity_label.set_forms([text, text.split(" · ")[0]] if text else [""])

    def score_text(self, text: str, prompt: str | None = None) -> bool:
        if self.context.in_use.info is None:
            self.status.show_message("The model is still loading.")
            return False
        self.overlay.clear()
        self.perplexity_label.setText("")
        reply = self.scoring.score_text(text, self.parts.panel.controls.current, prompt)
        if reply is None:
            return False
        toggle = self.parts.color_toggle  # switched on in the scored text's new conversation
        if not toggle.isChecked():
            toggle.setChecked(True)
            self.colour_forced = True  # after the toggle's own slot, which clears it
        self.draw_surprisal()
        return True

    def _on_colour_toggled(self, _on: bool) -> None:
        self.colour_forced = False  # the person's own choice from now on

    def _on_conversation(self, _conversation=None) -> None:
        """Another conversation: the colours scoring switched on go off again, and the last
        one's figures go. One that ends with a scored text (opened from the list or from
        an export) is shown as scoring showed it: its perplexity beside the status bar and
        the tokens coloured."""
        if self.colour_forced:
            self.parts.color_toggle.setChecked(False)  # clears the flag
        figures = self.scoring.conversation_figures()
        self._show_figures(figures)
        toggle = self.parts.color_toggle
        if figures and not toggle.isChecked():
            toggle.setChecked(True)
            self.colour_forced = True

    def colour_choice(self) -> bool:
        """The colour switch as the person set it (what is saved between sessions)."""
        return self.parts.color_toggle.isChecked() and not self.colour_forced

    def draw_surprisal(self) -> None:
        self.surprisal.show(self.scoring.scored_steps())

    @Slot(int, object)
    def _on_score_finished(self, tag: int, done: ScoreDone) -> None:
        if not self.scoring.score_finished(tag, done):
            return
        text = score_words(done)
        self._show_figures(text)
        self.status.show_message(f"Scored: {text}", 10000)

    # Replay --------------------------------------------------------------------------------

    def replay_selected(self) -> bool:
        job = self.scoring.start_replay(self.parts.panel.controls.current)
        if isinstance(job, Refusal):
            if job.why:
                self.status.show_message(job.why)
            return False
        self.overlay.clear()
        self.context.link.request_submit.emit(job)
        self.status.show_message("Replaying the reply under the current settings…")
        return True

    @Slot(int, object)
    def _on_token(self, tag: int, step: TokenStep) -> None:
        self.scoring.replay_token(tag, step)

    @Slot(int, object)
    def _on_job_finished(self, tag: int, finished) -> None:
        result = self.scoring.replay_finished(tag)
        if result is None:
            return
        words = replay_words(result)
        self.overlay.show(result, words)  # the legend's tooltip keeps it while the marks are shown
        self.status.show_message(words, 30000)
        self.context.actions.refresh()  # Branch at the replay's first change may run now

    def clear_replay(self) -> None:
        self.scoring.clear_replay()
        self.overlay.clear()
        self.context.actions.refresh()

    def _on_selection(self, ref) -> None:
        if self.scoring.selection_changed(ref):
            self.overlay.clear()
            self.context.actions.refresh()  # after the window's own refresh, which read the replay

    def branch_at_first_change(self) -> bool:
        """Continue the replayed reply from its first change, with the new settings' most
        likely token there (a branch)."""
        ok = self.scoring.branch_at_first_change()
        if ok is None:
            self.status.show_message(NO_REPLAY)
            return False
        self.overlay.clear()
        return ok

    # Exports -------------------------------------------------------------------------------

    def export_data(self, what: str):
        return self.scoring.export_data(what)

    def export(self, what: str, path: str | None = None) -> Path | None:
        data = self.scoring.export_data(what)
        if data is None:
            self.status.show_message(f"Nothing to export as {what}: {EXPORT_NEEDS[what]}")
            return None
        if path is None:
            path = self.context.folders.save_file(
                self.context.parent, EXPORTS, f"Export {what}", f"{what}.jsonl", "JSON Lines (*.jsonl);;CSV (*.csv)"
            )
            if not path:
                return None
        written = self.scoring.export(what, path, data)
        self.status.show_message(f"Exported {what} to {path}")
        return written

    def export_plot(self, which: str, path: str | None = None) -> Path | None:
        if path is None:
            path = self.context.folders.save_file(
                self.context.parent, PLOTS, f"Export the {which}", f"{which}.png", "PNG (*.png);;SVG (*.svg)"
            )
            if not path:
                return None
        view: QWidget = self.parts.timeline.view if which == "timeline" else self.parts.inspector
        save_plot(view, path)
        return Path(path)

    # Import --------------------------------------------------------------------------------

    def open_export(self, path: str | None = None) -> int | None:
        from app.store.export import ExportFormatError

        context = self.context
        if path is None:
            path = context.folders.open_file(
                context.parent, EXPORTS, "Open export", "JSON Lines (*.jsonl);;All files (*)"
            )
            if not path:
                return None
        try:
            conversation, source = self.scoring.open_export(path)
        except (OSError, ExportFormatError, KeyError, ValueError) as exc:
            context.show_error(f"Could not open {path}.\n\n{exc}", None)
            return None
        self.parts.open_conversation(conversation)
        if source is not None:
            self.parts.load(source)  # to continue its replies with the model that wrote them
        context.status.show_message(f"Opened {Path(path).name} (a copy; the file is not written).")
        return conversation
