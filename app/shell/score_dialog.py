"""Score text, replay under new settings, exports and imports, plot exports: the window's
File and Chat actions for them, and the controller that wires them. The work is the model
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

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QLabel, QMenu

from app.model.reply_analysis import Refusal
from app.model.scoring import EXPORT_NEEDS, NO_REPLAY, Scoring, replay_words, score_words
from app.views.file_dialogs import EXPORTS, PLOTS
from app.views.plot_export import save_plot
from app.views.score_views import ReplayOverlay, ScoreTextDialog, SurprisalRow
from engine.api.events import ScoreDone, TokenStep

if TYPE_CHECKING:
    from app.shell.window import MainWindow


class ScoreController(QObject):
    """One per window (``MainWindow.score_controller()``)."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.scoring = Scoring(window.model, window.in_use)
        self.perplexity_label = QLabel("")
        window.statusBar().addPermanentWidget(self.perplexity_label)
        worker = window.engine.worker
        worker.score_finished.connect(self._on_score_finished)
        worker.token_sampled.connect(self._on_token)
        worker.job_finished.connect(self._on_job_finished)
        self.overlay = ReplayOverlay(window.timeline)
        self.surprisal = SurprisalRow(window.timeline)
        events = window.model.events
        events.selection_changed.connect(self._on_selection)
        # A scored text's figures are its conversation's and its model's: gone with either.
        events.conversation_changed.connect(self._clear_figures)
        worker.model_loaded.connect(self._clear_figures)  # a slot of this object: queued to the GUI thread
        for name in ("selection_changed", "entries_changed", "stream_renamed"):
            getattr(events, name).connect(lambda *_: self.draw_surprisal())
        self._surprisal_redraws = window.clock.throttler(self.draw_surprisal, 200)
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

    def score_text(self, text: str, prompt: str | None = None) -> bool:
        if self.window.model_info is None:
            self.window.status.show_message("The model is still loading.")
            return False
        self.overlay.clear()
        self.perplexity_label.setText("")
        self.window.color_toggle.setChecked(True)
        reply = self.scoring.score_text(text, self.window.controls.current, prompt)
        if reply is None:
            return False
        self.draw_surprisal()
        return True

    def draw_surprisal(self) -> None:
        self.surprisal.show(self.scoring.scored_steps())

    @Slot(int, object)
    def _on_score_finished(self, tag: int, done: ScoreDone) -> None:
        if not self.scoring.score_finished(tag, done):
            return
        text = score_words(done)
        self.perplexity_label.setText(text)
        self.window.status.show_message(f"Scored: {text}", 10000)

    # Replay --------------------------------------------------------------------------------

    def replay_selected(self) -> bool:
        job = self.scoring.start_replay(self.window.controls.current)
        if isinstance(job, Refusal):
            if job.why:
                self.window.status.show_message(job.why)
            return False
        self.overlay.clear()
        self.window.link.request_submit.emit(job)
        self.window.status.show_message("Replaying the reply under the current settings…")
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
        self.window.status.show_message(words, 30000)

    def clear_replay(self) -> None:
        self.scoring.clear_replay()
        self.overlay.clear()

    def _on_selection(self, ref) -> None:
        if self.scoring.selection_changed(ref):
            self.overlay.clear()

    def branch_at_first_change(self) -> bool:
        """Continue the replayed reply from its first change, with the new settings' most
        likely token there (a branch)."""
        ok = self.scoring.branch_at_first_change()
        if ok is None:
            self.window.status.show_message(NO_REPLAY)
            return False
        self.overlay.clear()
        return ok

    # Exports -------------------------------------------------------------------------------

    def export_data(self, what: str):
        return self.scoring.export_data(what)

    def export(self, what: str, path: str | None = None) -> Path | None:
        data = self.scoring.export_data(what)
        if data is None:
            self.window.status.show_message(f"Nothing to export as {what}: {EXPORT_NEEDS[what]}")
            return None
        if path is None:
            path = self.window.folders.save_file(
                self.window, EXPORTS, f"Export {what}", f"{what}.jsonl", "JSON Lines (*.jsonl);;CSV (*.csv)"
            )
            if not path:
                return None
        written = self.scoring.export(what, path, data)
        self.window.status.show_message(f"Exported {what} to {path}")
        return written

    def export_plot(self, which: str, path: str | None = None) -> Path | None:
        if path is None:
            path = self.window.folders.save_file(
                self.window, PLOTS, f"Export the {which}", f"{which}.png", "PNG (*.png);;SVG (*.svg)"
            )
            if not path:
                return None
        save_plot(self.window.timeline.view if which == "timeline" else self.window.inspector, path)
        return Path(path)

    # Import --------------------------------------------------------------------------------

    def open_export(self, path: str | None = None) -> int | None:
        from app.store.export import ExportFormatError

        window = self.window
        if path is None:
            path = window.folders.open_file(window, EXPORTS, "Open export", "JSON Lines (*.jsonl);;All files (*)")
            if not path:
                return None
        try:
            conversation, source = self.scoring.open_export(path)
        except (OSError, ExportFormatError, KeyError, ValueError) as exc:
            window.show_error(f"Could not open {path}.\n\n{exc}")
            return None
        window.open_conversation(conversation)
        if source is not None:
            window.load_model(source)  # to continue its replies with the model that wrote them
        window.status.show_message(f"Opened {Path(path).name} (a copy; the file is not written).")
        return conversation


def controller(window: MainWindow) -> ScoreController:
    """The window's controller, made at its first use (``MainWindow.score_controller``)."""
    return window.score_controller()


def score_text_dialog(window: MainWindow) -> None:
    dialog = ScoreTextDialog(window, window.folders)
    if dialog.exec() == QDialog.DialogCode.Accepted:
        controller(window).score_text(dialog.text.toPlainText(), dialog.prompt.text().strip() or None)


REPLAY_TEXT = "Replay this reply under the current settings"
BRANCH_TEXT = "Branch at the replay's first change"


def _act(window, menu: QMenu, text: str, slot, needs: str | None = None) -> QAction:
    action = QAction(text, window)
    action.triggered.connect(lambda _=False: slot())
    menu.addAction(action)
    if needs is not None:  # a backend capability: disabled, with the reason, where it is off
        window.capability_gate.bind(action, needs)
    return action


EXPORT_LABELS = {
    "reply": "This reply…",
    "conversation": "This conversation (all branches)…",
    "compare": "This compare run…",
    "scored": "This scored text…",
}
MODEL_COMPARISON_NEEDS = "Compare the selected reply with a second model first (Models → Compare models…)."
LENS_NEEDS = "Select a token of a reply and read it in the inspector's Layers tab first."


def add_file_actions(window: MainWindow, menu: QMenu) -> dict[str, QAction]:
    """Score text…, Open export… and the Export submenu; returns the export items that
    depend on the selection, by what they write."""
    menu.addSeparator()
    _act(window, menu, "Score text…", lambda: score_text_dialog(window), "score")
    _act(window, menu, "Open export…", lambda: controller(window).open_export())
    export = menu.addMenu("Export")
    export.setToolTipsVisible(True)
    actions = {
        what: _act(window, export, label, lambda w=what: controller(window).export(w))
        for what, label in EXPORT_LABELS.items()
    }
    # Models → Compare models…'s records (app/shell/compare_models.py)
    actions["model comparison"] = _act(window, export, "This model comparison…", lambda: window.compare_models.export())
    # The logit lens's per-layer records (app/shell/logit_lens.py)
    actions["logit lens"] = _act(window, export, "This logit lens…", lambda: window.logit_lens.export(), "logit_lens")
    export.addSeparator()
    _act(window, export, "Timeline plot (PNG, SVG)…", lambda: controller(window).export_plot("timeline"))
    _act(window, export, "Inspector (PNG, SVG)…", lambda: controller(window).export_plot("inspector"))
    export.aboutToShow.connect(lambda: update_export_actions(window, actions))
    for name in ("selection_changed", "entries_changed", "conversation_changed"):
        getattr(window.model.events, name).connect(lambda *_: update_export_actions(window, actions))
    return actions


def update_export_actions(window: MainWindow, actions: dict[str, QAction]) -> None:
    """Each File → Export item is enabled only while the selection is what it writes (its
    tooltip says what to select otherwise); the logit lens's also needs the backend's say."""
    if not hasattr(window, "logit_lens"):
        return  # the window is still being built
    kinds = controller(window).scoring.export_kinds()
    needs = {what: ("" if what in kinds else why) for what, why in EXPORT_NEEDS.items()}
    compared, _ = window.compare_models.comparisons.selected()
    needs["model comparison"] = "" if compared is not None else MODEL_COMPARISON_NEEDS
    lens, _ = window.logit_lens.lens.selected()
    needs["logit lens"] = window.capability_gate.reason(actions["logit lens"]) or (
        "" if lens is not None and lens.rows else LENS_NEEDS
    )
    for what, action in actions.items():
        action.setEnabled(not needs[what])
        action.setToolTip(needs[what] or action.text())


def add_chat_actions(window: MainWindow, menu: QMenu) -> None:
    menu.addSeparator()
    _act(window, menu, REPLAY_TEXT, lambda: controller(window).replay_selected(), "replay")
    _act(window, menu, BRANCH_TEXT, lambda: controller(window).branch_at_first_change(), "replay")
