"""The model in use, from the window's side: loading a model or connecting to a server (asking
first while a reply is being written), the progress, and what the status bar and the welcome
say when it is ready or when it failed.

Loading replaces the engine's scheduler, which ends every reply it runs; so a load asked for
during a reply waits for the user's answer (stop the reply and load, load after the reply,
cancel), and the load itself is only sent to the worker once no reply is running. A load that
then fails leaves everything as it was: the previous model, its label, the replies.

The loader owns the Models menu's ways to choose a model (the default one, a folder, a GGUF
file, a Hugging Face repo id, a server, the recent ones); the menus lay them out.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from PySide6.QtCore import QObject, QSettings, Qt
from PySide6.QtWidgets import QAbstractButton, QInputDialog, QMenu, QMessageBox, QPlainTextEdit

from app.model.model_in_use import ready_words
from app.model.precision import model_label
from app.shell.context import ShellContext
from app.shell.engine_thread.worker import describe
from app.shell.startup.logging_setup import note_error, note_model
from app.views.file_dialogs import MODELS
from app.views.sampling_panel import SamplingPanel
from engine.api.events import FinishReason

MAX_RECENT = 8
NOT_REPORTED_REMOTE = "not reported (remote)"
STOP_AND_LOAD = "Stop the reply and load"
LOAD_AFTER = "Load after the reply"


def loading_words(fraction: float) -> str:
    """The welcome while the first model loads; a negative fraction means "not known"."""
    return "Loading the model…" if fraction < 0 else f"Loading the model ({int(fraction * 100)}%)…"


def recent_models(settings: QSettings) -> list[str]:
    """The local models loaded last, the latest first (Models → Recent models)."""
    try:
        return list(json.loads(settings.value("recent_models", "[]")))
    except (TypeError, ValueError):
        return []


class ModelLoader(QObject):
    def __init__(
        self,
        context: ShellContext,
        panel: SamplingPanel,
        composer: QPlainTextEdit,
        stop: Callable[[], None],
        close_error: Callable[[], None],
    ) -> None:
        """``stop``: the window's Stop (the reply and every analysis); ``close_error``:
        closes the error box shown last, if it is still open."""
        super().__init__(context.parent)
        self.context, self.panel, self.composer = context, panel, composer
        self.stop, self.close_error = stop, close_error
        self.model, self.status = context.model, context.status
        self.in_use = context.in_use  # the model in use (app/model/model_in_use.py): updated here only
        self.box: QMessageBox | None = None  # the question asked while a reply is being written
        self.pending: Callable[[], None] | None = None  # a load waiting for the reply to end
        self.connect_dialog = None
        worker = context.link.engine.worker
        worker.model_progressed.connect(self._on_progress)
        worker.model_loaded.connect(self._on_loaded)
        worker.model_failed.connect(self._on_failed)
        worker.job_finished.connect(self._on_job_finished)
        worker.memory_measured.connect(self._on_memory)
        self.model.events.busy_changed.connect(self._on_busy_changed)
        panel.thinking_switched.connect(self.model.generation.set_enable_thinking)  # the template's switch
        # The welcome speaks of "the question below" only while the message box holds one.
        composer.textChanged.connect(self.refresh_welcome)
        add = context.actions.add
        self.default_action = add("Default model (SmolLM2-135M-Instruct)", lambda: self.load("default"))
        self.folder_action = add("Open model folder…", self.open_folder)
        self.gguf_action = add("Open GGUF file…", self.open_gguf)
        self.repo_action = add("Hugging Face repo id…", self.open_repo)
        self.connect_action = add("Connect to a server…", self.open_connect_dialog)
        self.recent_menu = QMenu("Recent models", context.parent)
        self.recent_menu.aboutToShow.connect(self.fill_recent)

    # Menu items -------------------------------------------------------------------------------

    def fill_recent(self) -> None:
        self.recent_menu.clear()
        for source in recent_models(self.context.settings):
            action = self.recent_menu.addAction(source)
            action.triggered.connect(lambda _=False, s=source: self.load(s))

    def open_folder(self) -> None:
        folder = self.context.folders.open_folder(self.context.parent, MODELS, "Open mlx-lm model folder")
        if folder:
            self.load(folder)

    def open_gguf(self) -> None:
        parent = self.context.parent
        path = self.context.folders.open_file(parent, MODELS, "Open GGUF file", "GGUF models (*.gguf)")
        if path:
            self.load(path)

    def open_repo(self) -> None:
        repo, ok = QInputDialog.getText(
            self.context.parent, "Hugging Face model", "Repo id (e.g. mlx-community/SmolLM2-360M-Instruct):"
        )
        if ok and repo.strip():
            self.load(repo.strip())

    def open_connect_dialog(self):
        """Models → Connect to a server… (``app/views/connect_dialog.py``)."""
        from app.views.connect_dialog import ConnectDialog

        self.connect_dialog = ConnectDialog(self.context.settings, self.context.parent)
        self.connect_dialog.connect_requested.connect(self.connect_remote)
        self.connect_dialog.probe_failed.connect(note_error)  # what the dialog says, in the log too
        self.connect_dialog.open()
        return self.connect_dialog

    # Requests ---------------------------------------------------------------------------------

    def load(self, source: str) -> None:
        """Load ``source`` in the precision and with the KV cache chosen for it (read when the
        load is sent, so a load that waited for a reply uses the latest choices)."""
        from app.model.kv_cache import CHOICE as KV_CHOICE
        from app.model.kv_cache import kv_setting
        from app.model.precision import CHOICE as PRECISION_CHOICE

        def send() -> None:
            settings = self.context.settings
            kv = kv_setting(KV_CHOICE.saved(settings, source))
            self.context.link.request_load.emit(source, PRECISION_CHOICE.saved(settings, source), kv)

        self.when_idle(source, lambda: self._start(source, send))

    def connect_remote(self, spec) -> None:
        """Use the server of ``spec`` (an ``app.model.remote_jobs.RemoteSpec``) from now on."""
        self.when_idle(spec.url, lambda: self._start(spec.url, lambda: self.context.link.request_connect.emit(spec)))

    def when_idle(self, name: str, start: Callable[[], None]) -> None:
        """Run ``start`` now if no reply is being written, else once the user said how."""
        if not self.model.busy():
            start()
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Logitscope", f"Load {name} now?", parent=self.context.parent)
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
        if not self.model.busy():  # the reply ended while the question was open
            self._on_busy_changed(False)
        elif button is stop:
            self.stop()
        else:
            self.status.show_message(f"{name} will load when the reply ends.", 0)

    def _on_busy_changed(self, busy: bool) -> None:
        if not busy and self.pending is not None:
            start, self.pending = self.pending, None
            start()

    def _start(self, source: str, send: Callable[[], None]) -> None:
        self.in_use.source = source
        self.status.loading(source)
        if self.in_use.info is None:  # the welcome says so from the start, not at the first progress
            self.model.set_welcome_state(loading_words(-1))
        send()

    # Worker events ----------------------------------------------------------------------------

    def _on_progress(self, stage: str, fraction: float) -> None:
        self.status.model_progressed(stage, fraction)
        if self.in_use.info is None:
            self.model.set_welcome_state(loading_words(fraction))

    def _on_loaded(self, info) -> None:
        from app.model.remote_labels import reports_one_stage, status_text
        from app.model.reply_origin import backend_of

        model, panel, settings = self.model, self.panel, self.context.settings
        self.in_use.info = info
        # In the same slot as the model in use: a separate slot on model_loaded is a separate
        # queued event, and between the two the menus would follow the previous backend.
        self.context.actions.apply(info.capabilities)
        panel.set_vocab_size(info.vocab_size)
        panel.set_server(info.server)
        # Reasoning markers (the answer's settings, the budget) and the template's enable_thinking.
        panel.set_reasoning(info.reasoning is not None, info.thinking_switch)
        model.generation.enable_thinking = panel.reasoning.think_toggle.isChecked() if info.thinking_switch else None
        note_model(info.name, info.source)
        # Replies saved from now on record where the model came from, what it computes in and
        # on which backend: the views label each reply by those, not by the model loaded now.
        self.context.store.note_model(info.name, info.source, info.precision, backend_of(info))
        remote = reports_one_stage(info)
        self.in_use.label = status_text(info) if remote else model_label(info)
        self.status.model_ready(self.in_use.label, f"Loaded {info.name}")
        if not info.capabilities.load_files:
            # A server's model is not remembered as "the model" (a restart loads the local one).
            self.status.memory_label.setText(f"memory: {NOT_REPORTED_REMOTE}")
            self.refresh_welcome()
            if info.server_note:  # connected all the same (the model as typed): say what failed
                self.status.show_message(f"Connected to {info.source}, but {info.server_note}", 20_000)
            return
        settings.setValue("model", info.source)
        recent = [info.source] + [r for r in recent_models(settings) if r != info.source]
        settings.setValue("recent_models", json.dumps(recent[:MAX_RECENT]))
        self.refresh_welcome()

    def refresh_welcome(self) -> None:
        """The welcome's words for the model in use and what the message box holds now."""
        if self.in_use.info is None:
            return
        words = ready_words(self.in_use.info, bool(self.composer.toPlainText().strip()))
        if words != self.model.welcome_state:  # not at every keystroke: a redraw each time
            self.model.set_welcome_state(words)

    def _on_memory(self, nbytes: int) -> None:
        info = self.in_use.info
        if info is not None and not info.capabilities.memory:
            self.status.memory_label.setText(f"memory: {NOT_REPORTED_REMOTE}")
            return
        self.status.memory_measured(nbytes)

    def _on_failed(self, source: str, exc: BaseException) -> None:
        # The previous model stays in use: its label, not the failed load's last stage.
        self.status.model_failed(self.in_use.label, f"Could not load {source}.")
        if self.in_use.info is None:
            self.model.set_welcome_state("No model is loaded: choose one in the Models menu.")
        self.context.show_error(f"Could not load {source}.\n\n{describe(exc)}", exc)  # logged with its traceback

    def _on_job_finished(self, _tag: int, finished) -> None:
        from app.model.remote_labels import NOT_REPORTED

        info = self.in_use.info
        if finished.finish_reason != FinishReason.ERROR or info is None or not info.capabilities.network:
            return
        kept = ""
        if finished.text:
            kept = f"\n\nThe partial reply ({len(finished.text)} characters) was kept and saved."
        self.close_error()  # the model's own "the reply stopped" box: this one says more
        # The log names the server and the model, which the box leaves to the status bar.
        note_error(f"server {info.source} (model {info.name}) failed a reply: {finished.error or NOT_REPORTED}")
        self.context.show_error(f"The server failed: {finished.error or NOT_REPORTED}{kept}", None)
