"""Score text, replay under new settings, exports and imports, plot exports: the window's
File and Chat actions for them, and the controller that talks to the worker.

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

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
)

from app.model.replay import compare
from app.model.scored import ReplayRun, replay_job, start_score
from app.views.plot_export import save_plot
from engine.events import FinishReason, ScoreDone, TokenStep

if TYPE_CHECKING:
    from app.shell.window import MainWindow


class ScoreTextDialog(QDialog):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Score text")
        self.resize(640, 420)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("The text to score (every token's probability as the model sees it):"))
        self.text = QPlainTextEdit()
        layout.addWidget(self.text)
        row = QHBoxLayout()
        self.open_button = QPushButton("Open .txt / .md…")
        self.open_button.clicked.connect(self.open_file)
        row.addWidget(self.open_button)
        row.addWidget(QLabel("As the reply to:"))
        self.prompt = QLineEdit()
        self.prompt.setPlaceholderText("(optional) a user message: score the text as the assistant's answer")
        row.addWidget(self.prompt, 1)
        layout.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Score")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a text", "", "Text (*.txt *.md);;All files (*)")
        if path:
            self.load(path)

    def load(self, path: str | Path) -> None:
        self.text.setPlainText(Path(path).read_text(encoding="utf-8", errors="replace"))


class ScoreController(QObject):
    """One per window (``controller(window)``)."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.last_done: ScoreDone | None = None
        self.replay: ReplayRun | None = None
        self.result = None  # app.model.replay.Replay
        self.perplexity_label = QLabel("")
        window.statusBar().addPermanentWidget(self.perplexity_label)
        worker = window.engine.worker
        worker.score_finished.connect(self._on_score_finished)
        worker.token_sampled.connect(self._on_token)
        worker.job_finished.connect(self._on_job_finished)
        self.overlay_prob = pg.PlotDataItem([], [], pen=pg.mkPen("#d62728", width=1.5, style=Qt.PenStyle.DashLine))
        self.overlay_removed = pg.ScatterPlotItem([], [], symbol="x", size=11, pen=pg.mkPen("#d62728", width=2))
        self.overlay_differs = pg.ScatterPlotItem([], [], symbol="t1", size=10, brush=pg.mkBrush("#ff7f0e"))
        for item in (self.overlay_prob, self.overlay_removed, self.overlay_differs):
            window.timeline.prob_plot.addItem(item)
        window.model.events.selection_changed.connect(self._on_selection)
        # A scored text's surprisal (bits, -log2 p under raw), in a third row of the timeline,
        # shown while a scored text is selected.
        timeline = window.timeline
        self.surprisal_plot = timeline.view.addPlot(row=2, col=0)
        self.surprisal_plot.setXLink(timeline.prob_plot)
        self.surprisal_plot.setLabel("left", "surprisal (bits)")
        self.surprisal_plot.showGrid(x=False, y=True, alpha=0.2)
        self.surprisal_curve = self.surprisal_plot.plot([], [], pen=pg.mkPen("#9467bd", width=1.5))
        self.surprisal_plot.hide()
        self._surprisal_drawn: tuple | None = None
        self.score_tags: set[int] = set()
        events = window.model.events
        for name in ("selection_changed", "entries_changed", "stream_renamed"):
            getattr(events, name).connect(lambda *_: self.draw_surprisal())
        self._surprisal_redraws = window.clock.throttler(self.draw_surprisal, 200)
        events.tokens_added.connect(lambda *_: self._surprisal_redraws.request())

    # Score text ------------------------------------------------------------------------------

    def score_text(self, text: str, prompt: str | None = None) -> bool:
        if self.window.model_info is None:
            self.window.status.show_message("The model is still loading.")
            return False
        self.clear_replay()
        self.perplexity_label.setText("")
        self.window.color_toggle.setChecked(True)
        reply = start_score(self.window.model, text, self.window.controls.current, prompt or None)
        if reply is None:
            return False
        self.score_tags.add(reply.id)
        self.draw_surprisal()
        return True

    def scored_steps(self) -> list[TokenStep] | None:
        """The steps of the selected stream when it is a scored text (being scored or saved)."""
        model = self.window.model
        stream = model.selection[0] if model.selection is not None else None
        if stream is None:
            return None
        if stream[0] == "reply":
            return model.steps_of(stream) if stream[1] in self.score_tags else None
        message = model.message_of(stream)
        found = next((b for b in message.branches if b.id == stream[1]), None) if message is not None else None
        if found is None or not found.steps or not all(s.forced for s in found.steps):
            return None
        return found.steps if found.finish_reason == FinishReason.SCORED or found.steps[0].rank is not None else None

    def draw_surprisal(self) -> None:
        steps = self.scored_steps()
        if not steps:
            self.surprisal_plot.hide()
            self._surprisal_drawn = None
            return
        key = (id(steps), len(steps))
        if key == self._surprisal_drawn:
            return
        self._surprisal_drawn = key
        x = np.fromiter((s.index for s in steps), float, len(steps))
        bits = np.fromiter((-s.logprobs[0] / math.log(2) for s in steps), float, len(steps))
        self.surprisal_curve.setData(x, bits)
        self.surprisal_plot.show()

    @Slot(int, object)
    def _on_score_finished(self, tag: int, done: ScoreDone) -> None:
        if self.replay is not None and tag == self.replay.tag:
            self.replay.done = done
            return
        self.last_done = done
        text = (
            f"perplexity {done.perplexity:.2f} · {done.mean_surprisal_bits:.2f} bits/token · "
            f"{done.tokens} tokens at {done.tokens_per_second:.1f} tok/s"
        )
        self.perplexity_label.setText(text)
        self.window.status.show_message(f"Scored: {text}", 10000)

    # Replay --------------------------------------------------------------------------------

    def replay_selected(self) -> bool:
        window = self.window
        model = window.model
        stream = model.selection[0] if model.selection is not None else None
        if window.model_info is None or stream is None or stream[0] != "branch":
            window.status.show_message("Select a token of a saved reply to replay it.")
            return False
        if self.replay is not None and self.replay.done is None:
            return False
        params = window.controls.current
        job = replay_job(model, stream, params, model._new_id())
        if job is None:
            window.status.show_message("Select a token of a saved reply to replay it.")
            return False
        self.clear_replay()
        self.replay = ReplayRun(job.tag, stream, params)
        window.link.request_submit.emit(job)
        window.status.show_message("Replaying the reply under the current settings…")
        return True

    @Slot(int, object)
    def _on_token(self, tag: int, step: TokenStep) -> None:
        if self.replay is not None and tag == self.replay.tag:
            self.replay.steps.append(step)

    @Slot(int, object)
    def _on_job_finished(self, tag: int, finished) -> None:
        if self.replay is None or tag != self.replay.tag:
            return
        original = self.window.model.steps_of(self.replay.stream) or []
        self.result = compare(original, self.replay.steps, self.replay.params)
        self.draw_replay()
        first = self.result.first_change
        where = "nowhere" if first is None else f"first at token {first}"
        self.window.status.show_message(
            f"Replay: removed {len(self.result.removed)} tokens, most likely token differs at "
            f"{len(self.result.differs)} positions ({where}).",
            10000,
        )

    def draw_replay(self) -> None:
        r = self.result
        if r is None:
            return
        x = np.array([s.index for s in r.steps], float)
        self.overlay_prob.setData(x, np.array(r.chosen_prob, float))
        self.overlay_removed.setData(np.array(r.removed, float), np.zeros(len(r.removed)))
        self.overlay_differs.setData(np.array(r.differs, float), np.full(len(r.differs), 1.02))

    def clear_replay(self) -> None:
        self.replay, self.result = None, None
        for item in (self.overlay_prob, self.overlay_removed, self.overlay_differs):
            item.setData([], [])

    def _on_selection(self, ref) -> None:
        if self.replay is not None and (ref is None or ref[0] != self.replay.stream):
            self.clear_replay()

    def branch_at_first_change(self) -> bool:
        """Continue the replayed reply from its first change, with the new settings' most
        likely token there (a branch)."""
        r, run = self.result, self.replay
        if r is None or run is None or r.first_change is None:
            self.window.status.show_message("Replay a reply first (Chat → Replay under the current settings).")
            return False
        index = r.first_change
        token = r.new_top[index]
        self.window.model.select((run.stream, index))
        ok = self.window.model.pick_token(token, run.params)
        self.clear_replay()
        return ok

    # Exports -------------------------------------------------------------------------------

    def export_data(self, what: str):
        from app.store.export_store import compare_only, from_store, reply_only, scored

        window, model = self.window, self.window.model
        if what == "scored" or (what == "reply" and self._selected_is_scored()):
            steps = model.steps_of(model.selection[0]) if model.selection else None
            message = model.message_of(model.selection[0]) if model.selection else None
            if not steps or message is None:
                return None
            branch = message.branch
            if branch is not None:
                source = {"name": branch.model, "source": branch.model_source or window.model_source}
                source["precision"] = branch.precision
            else:
                info = window.model_info
                source = {"name": model.model_name, "source": window.model_source}
                source["precision"] = (info.precision or None) if info is not None else None
            params = steps[0].params
            data = scored(message.branch.text if message.branch else "", None, params, steps, self.last_done, source)
            return data
        if model.conversation is None:
            return None
        data = from_store(model.store, model.conversation.id, window.model_source)
        if what == "conversation":
            return data
        stream = model.selection[0] if model.selection else None
        if stream is None or stream[0] != "branch":
            return None
        for i, m in enumerate(
            model.store.db.execute(
                "SELECT id FROM messages WHERE conversation_id = ? ORDER BY id", (model.conversation.id,)
            ).fetchall()
        ):
            rows = model.store.db.execute("SELECT id FROM branches WHERE message_id = ? ORDER BY id", (m[0],))
            ids = [b for (b,) in rows]
            if stream[1] in ids:
                j = ids.index(stream[1])
                if what == "compare":
                    for k, run in enumerate(data.runs):
                        if run.message == i and any(c["branch"] == j for c in run.columns):
                            return compare_only(data, k)
                    return None
                return reply_only(data, i, j)
        return None

    def _selected_is_scored(self) -> bool:
        model = self.window.model
        message = model.message_of(model.selection[0]) if model.selection else None
        return (
            message is not None and message.branch is not None and message.branch.finish_reason == FinishReason.SCORED
        )

    def export(self, what: str, path: str | None = None) -> Path | None:
        from app.store.export import write

        data = self.export_data(what)
        if data is None:
            self.window.status.show_message(f"Nothing to export as {what}: select a saved token first.")
            return None
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self.window, f"Export {what}", f"{what}.jsonl", "JSON Lines (*.jsonl);;CSV (*.csv)"
            )
            if not path:
                return None
        write(data, path)
        self.window.status.show_message(f"Exported {what} to {path}")
        return Path(path)

    def export_plot(self, which: str, path: str | None = None) -> Path | None:
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self.window, f"Export the {which}", f"{which}.png", "PNG (*.png);;SVG (*.svg)"
            )
            if not path:
                return None
        save_plot(self.window.timeline.view if which == "timeline" else self.window.inspector, path)
        return Path(path)

    # Import --------------------------------------------------------------------------------

    def open_export(self, path: str | None = None) -> int | None:
        from app.store.export import ExportFormatError, from_records, read_jsonl
        from app.store.export_store import to_store

        window = self.window
        if path is None:
            path, _ = QFileDialog.getOpenFileName(window, "Open export", "", "JSON Lines (*.jsonl);;All files (*)")
            if not path:
                return None
        try:
            data = from_records(read_jsonl(path))
        except (OSError, ExportFormatError, KeyError, ValueError) as exc:
            window.show_error(f"Could not open {path}.\n\n{exc}")
            return None
        conversation = to_store(data, window.model.store, title_prefix="[export] ")
        window.open_conversation(conversation)
        source = (data.model or {}).get("source")
        if source and source != window.model_source and (source == "default" or Path(source).exists()):
            window.load_model(source)  # to continue its replies with the model that wrote them
        window.status.show_message(f"Opened {Path(path).name} (a copy; the file is not written).")
        return conversation


def controller(window: MainWindow) -> ScoreController:
    """The window's controller, made at its first use (``MainWindow.score_controller``)."""
    return window.score_controller()


def score_text_dialog(window: MainWindow) -> None:
    dialog = ScoreTextDialog(window)
    if dialog.exec() == QDialog.DialogCode.Accepted:
        controller(window).score_text(dialog.text.toPlainText(), dialog.prompt.text().strip() or None)


def _act(window, menu: QMenu, text: str, slot) -> QAction:
    action = QAction(text, window)
    action.triggered.connect(lambda _=False: slot())
    menu.addAction(action)
    return action


def add_file_actions(window: MainWindow, menu: QMenu) -> None:
    menu.addSeparator()
    _act(window, menu, "Score text…", lambda: score_text_dialog(window))
    _act(window, menu, "Open export…", lambda: controller(window).open_export())
    export = menu.addMenu("Export")
    for what, label in (
        ("reply", "This reply…"),
        ("conversation", "This conversation (all branches)…"),
        ("compare", "This compare run…"),
        ("scored", "This scored text…"),
    ):
        _act(window, export, label, lambda w=what: controller(window).export(w))
    export.addSeparator()
    _act(window, export, "Timeline plot (PNG, SVG)…", lambda: controller(window).export_plot("timeline"))
    _act(window, export, "Inspector (PNG, SVG)…", lambda: controller(window).export_plot("inspector"))


def add_chat_actions(window: MainWindow, menu: QMenu) -> None:
    menu.addSeparator()
    _act(window, menu, "Replay this reply under the current settings", lambda: controller(window).replay_selected())
    _act(window, menu, "Branch at the replay's first change", lambda: controller(window).branch_at_first_change())


def finite(value: float) -> float:
    return value if math.isfinite(value) else float("nan")
