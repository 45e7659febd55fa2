"""The model in use, from the window's side: loading a model or connecting to a server (asking
first while a reply is being written), the progress, and what the status bar and the welcome
say when it is ready or when it failed.

Loading replaces the engine's scheduler, which ends every reply it runs; so a load asked for
during a reply waits for the user's answer (stop the reply and load, load after the reply,
cancel), and the load itself is only sent to the worker once no reply is running. A load that
then fails leaves everything as it was: the previous model, its label, the replies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QAbstractButton, QMessageBox

from app.model.model_in_use import ready_words
from app.model.precision import model_label
from app.shell.kv_cache_menu import revert_after_failure, update_kv_cache_menu
from app.shell.logging_setup import note_error, note_model
from app.shell.menus import recent_models
from app.shell.precision_menu import update_precision_menu
from app.shell.worker import describe
from engine.api.events import FinishReason

if TYPE_CHECKING:
    from app.shell.window import MainWindow

MAX_RECENT = 8
NOT_REPORTED_REMOTE = "not reported (remote)"
STOP_AND_LOAD = "Stop the reply and load"
LOAD_AFTER = "Load after the reply"


def loading_words(fraction: float) -> str:
    """The welcome while the first model loads; a negative fraction means "not known"."""
    return "Loading the model…" if fraction < 0 else f"Loading the model ({int(fraction * 100)}%)…"


class ModelLoader(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.in_use = window.in_use  # the model in use (app/model/model_in_use.py): updated here only
        self.box: QMessageBox | None = None  # the question asked while a reply is being written
        self.pending: Callable[[], None] | None = None  # a load waiting for the reply to end
        worker = window.engine.worker
        worker.model_progressed.connect(self._on_progress)
        worker.model_loaded.connect(self._on_loaded)
        worker.model_failed.connect(self._on_failed)
        worker.job_finished.connect(self._on_job_finished)
        window.model.events.busy_changed.connect(self._on_busy_changed)
        window.panel.thinking_switched.connect(window.model.generation.set_enable_thinking)  # the template's switch
        # The welcome speaks of "the question below" only while the message box holds one.
        window.composer.textChanged.connect(self.refresh_welcome)

    # Requests ---------------------------------------------------------------------------------

    def load(self, source: str) -> None:
        """Load ``source`` in the precision and with the KV cache chosen for it (read when the
        load is sent, so a load that waited for a reply uses the latest choices)."""
        from app.model.kv_cache import kv_setting
        from app.shell.kv_cache_menu import saved_kv
        from app.shell.precision_menu import saved_choice

        def send() -> None:
            settings = self.window.settings
            kv = kv_setting(saved_kv(settings, source))
            self.window.link.request_load.emit(source, saved_choice(settings, source), kv)

        self.when_idle(source, lambda: self._start(source, send))

    def connect_remote(self, spec) -> None:
        """Use the server of ``spec`` (an ``app.model.remote_jobs.RemoteSpec``) from now on."""
        self.when_idle(spec.url, lambda: self._start(spec.url, lambda: self.window.link.request_connect.emit(spec)))

    def when_idle(self, name: str, start: Callable[[], None]) -> None:
        """Run ``start`` now if no reply is being written, else once the user said how."""
        if not self.window.model.busy():
            start()
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Logitscope", f"Load {name} now?", parent=self.window)
        box.setInformativeText(
            "A reply is being written. Loading another model stops it (the tokens so far are kept); "
            "or the model can load once the reply has ended."
        )
        stop = box.addButton(STOP_AND_LOAD, QMessageBox.ButtonRole.DestructiveRole)
        later = box.addButton(LOAD_AFTER, QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(later)
        box.setWindowModality(Qt.WindowModality.WindowModal)  # a sheet on macOS
        box.buttonClicked.connect(lambda button: self._answered(button, stop, later, name, start))
        self.box = box
        box.open()

    def _answered(self, button: QAbstractButton, stop, later, name: str, start: Callable[[], None]) -> None:
        if button is not stop and button is not later:
            return
        self.pending = start
        if not self.window.model.busy():  # the reply ended while the question was open
            self._on_busy_changed(False)
        elif button is stop:
            self.window.stop()
        else:
            self.window.status.show_message(f"{name} will load when the reply ends.", 0)

    def _on_busy_changed(self, busy: bool) -> None:
        if not busy and self.pending is not None:
            start, self.pending = self.pending, None
            start()

    def _start(self, source: str, send: Callable[[], None]) -> None:
        self.in_use.source = source
        self.window.status.loading(source)
        send()

    # Worker events ----------------------------------------------------------------------------

    def _on_progress(self, stage: str, fraction: float) -> None:
        self.window.status.model_progressed(stage, fraction)
        if self.window.model_info is None:
            self.window.model.set_welcome_state(loading_words(fraction))

    def _on_loaded(self, info) -> None:
        from app.model.remote_labels import reports_one_stage, status_text
        from app.model.reply_origin import backend_of

        window = self.window
        self.in_use.info = info
        window.panel.set_vocab_size(info.vocab_size)
        window.panel.set_server(info.server)
        window.panel.set_thinking_switch(info.thinking_switch)  # the template's enable_thinking, if it has one
        window.model.generation.enable_thinking = (
            window.panel.reasoning.think_toggle.isChecked() if info.thinking_switch else None
        )
        note_model(info.name, info.source)
        # Replies saved from now on record where the model came from, what it computes in and
        # on which backend: the views label each reply by those, not by the model loaded now.
        window.store.note_model(info.name, info.source, info.precision, backend_of(info))
        remote = reports_one_stage(info)
        self.in_use.label = status_text(info) if remote else model_label(info)
        update_precision_menu(window)
        update_kv_cache_menu(window)
        window.status.model_ready(self.in_use.label, f"Loaded {info.name}")
        if not info.capabilities.load_files:
            # A server's model is not remembered as "the model" (a restart loads the local one).
            window.status.memory_label.setText(f"memory: {NOT_REPORTED_REMOTE}")
            self.refresh_welcome()
            if info.server_note:  # connected all the same (the model as typed): say what failed
                window.status.show_message(f"Connected to {info.source}, but {info.server_note}", 20_000)
            return
        window.settings.setValue("model", info.source)
        recent = [info.source] + [r for r in recent_models(window) if r != info.source]
        window.settings.setValue("recent_models", json.dumps(recent[:MAX_RECENT]))
        self.refresh_welcome()

    def refresh_welcome(self) -> None:
        """The welcome's words for the model in use and what the message box holds now."""
        if self.in_use.info is None:
            return
        words = ready_words(self.in_use.info, bool(self.window.composer.toPlainText().strip()))
        if words != self.window.model.welcome_state:  # not at every keystroke: a redraw each time
            self.window.model.set_welcome_state(words)

    def _on_failed(self, source: str, exc: BaseException) -> None:
        window = self.window
        # The previous model stays in use: its label, not the failed load's last stage.
        window.status.model_failed(self.in_use.label, f"Could not load {source}.")
        revert_after_failure(window, source)  # a refused KV setting: the menu says what runs
        if window.model_info is None:
            window.model.set_welcome_state("No model is loaded: choose one in the Models menu.")
        window.show_error(f"Could not load {source}.\n\n{describe(exc)}", exc)  # logged with its traceback

    def _on_job_finished(self, _tag: int, finished) -> None:
        from app.model.remote_labels import NOT_REPORTED

        info = self.window.model_info
        if finished.finish_reason != FinishReason.ERROR or info is None or not info.capabilities.network:
            return
        kept = ""
        if finished.text:
            kept = f"\n\nThe partial reply ({len(finished.text)} characters) was kept and saved."
        box = getattr(self.window, "error_box", None)
        if box is not None and box.isVisible():
            box.close()  # the model's own "the reply stopped" box: this one says more
        # The log names the server and the model, which the box leaves to the status bar.
        note_error(f"server {info.source} (model {info.name}) failed a reply: {finished.error or NOT_REPORTED}")
        self.window.show_error(f"The server failed: {finished.error or NOT_REPORTED}{kept}")
