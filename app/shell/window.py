"""The main window: builds the parts, the controllers, then the menus, and wires the views
to the model and the engine's worker.

State lives in :class:`app.model.chat.ChatModel` (Qt-free); the chat, inspector and
timeline subscribe to its events and redraw themselves on one ~30 Hz clock
(:mod:`app.views.throttle`). The window turns commands (send, stop, pick, compare, keep) into
model calls, the model's job events into queued signals to the worker, and the worker's
signals back into model calls.

The order of construction is the design: the parts first (store, model, model in use,
status bar, actions, link to the worker), then one :class:`app.shell.context.ShellContext`
of them, then each controller with the context (and what else it needs, passed by name),
then the menus from the controllers' actions. No controller is given the window, except the
analyses of a reply (Check precision, Compare models, the logit lens) for now.
"""

from __future__ import annotations

import contextlib
import gc
import time
from functools import partial
from pathlib import Path

import platformdirs
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication, QMainWindow, QMessageBox

from app.model.chat import DEFAULT_SYSTEM, ChatModel
from app.model.draft import DraftAcceptance
from app.model.model_in_use import ModelInUse
from app.shell.actions import Actions
from app.shell.analysis_actions import analysis_actions
from app.shell.background import QtBackground
from app.shell.context import ShellContext
from app.shell.controllers.chat_commands import ChatCommands
from app.shell.controllers.compare_models import CompareModels
from app.shell.controllers.draft_model import DraftModelController
from app.shell.controllers.kv_cache_menu import KVCacheMenu
from app.shell.controllers.library import LibraryController
from app.shell.controllers.logit_lens import LogitLensController
from app.shell.controllers.model_loading import ModelLoader, recent_models
from app.shell.controllers.precision_check import PrecisionCheck
from app.shell.controllers.precision_menu import PrecisionMenu
from app.shell.controllers.score_dialog import ScoreController, ScoreParts
from app.shell.controllers.serving import ServingController
from app.shell.controllers.step_analyses import step_analyses
from app.shell.engine_link import EngineLink
from app.shell.engine_thread.worker import describe
from app.shell.layout import DockMemory, Docks, add_docks, reset_layout, set_minimum_sizes, tabbed_dock
from app.shell.menus import MenuParts, build_menus
from app.shell.score_actions import ScoreActions
from app.shell.startup.logging_setup import note_error
from app.shell.startup.recovery import announce_recovered, attach_journal, open_window_store
from app.shell.tab_order import focus_next, tab_order
from app.shell.window_actions import Toggles, WindowActions
from app.shell.window_settings import restore_settings, save_settings
from app.store.compare_runs import TokenRef
from app.store.stream import StreamJournal
from app.views.chat_panel import ChatPanel
from app.views.file_dialogs import Folders
from app.views.inspector import InspectorWidget
from app.views.sampling_panel import SamplingPanel
from app.views.status import StatusWidgets
from app.views.theme import apply_theme
from app.views.throttle import RedrawClock
from app.views.timeline import TimelineWidget
from engine.api.params import SamplingParamsError

FIRST_PROMPT = "What is the capital of France?"


class MainWindow(QMainWindow):
    def __init__(
        self,
        db_path: str | Path | None = None,
        settings: QSettings | None = None,
        model: str | None = None,
        session_factory=None,
    ) -> None:
        super().__init__()
        from app.views.resources import app_icon

        self.setWindowTitle("Logitscope")
        self.setWindowIcon(app_icon())
        self.settings = settings or QSettings("Logitscope", "Logitscope")
        self.folders = Folders(self.settings)  # each kind of file dialog opens where it last did
        self.store = open_window_store(
            db_path or Path(platformdirs.user_data_dir("logitscope")) / "logitscope.sqlite3", self
        )
        self.background = QtBackground(self)
        self.in_use = ModelInUse()  # the model in use: ModelLoader updates it; the chat reads it
        self.model = ChatModel(self.store, background=self.background, in_use=self.in_use)
        self.status = StatusWidgets(self.statusBar())
        self.model_label = self.status.model_label
        self.saving = attach_journal(self.store, self.model, self.status, self)  # replies saved as they stream
        self.last_error = ""
        self.error_box: QMessageBox | None = None
        self._closed = False
        self.clock = RedrawClock(self)
        # Every action with its one rule: the backend's capability and what the state allows.
        self.actions = Actions(self)

        self._build_views()
        self._connect_model()
        self.link = EngineLink(self.model, session_factory, self)
        self.engine = self.link.engine
        self.context = ShellContext(
            parent=self,
            model=self.model,
            in_use=self.in_use,
            store=self.store,
            settings=self.settings,
            folders=self.folders,
            status=self.status,
            link=self.link,
            actions=self.actions,
            background=self.background,
            show_error=self.show_error,
        )
        self._build_controllers()
        self._connect_worker()
        restore_settings(self.docks, self.settings, self.color_toggle, self.set_theme)
        last = self.settings.value("conversation")
        if last is not None:
            with contextlib.suppress(TypeError, ValueError):
                self.open_conversation(int(last))
        self.recovery_note = announce_recovered(self.context, self.open_conversation)
        if self.model.conversation is None:
            self.composer.setPlainText(FIRST_PROMPT)
        self.composer.setFocus()  # the welcome says "press Enter to send the question below"
        self.load_model(model or self.settings.value("model", "default"))

    # Construction ---------------------------------------------------------------------------

    def _build_views(self) -> None:
        """The chat in the centre, the inspector, timeline and sampling panel in docks."""
        self.central = ChatPanel(DEFAULT_SYSTEM)
        self.setCentralWidget(self.central)
        self.chat, self.composer = self.central.chat, self.central.composer
        self.system_prompt, self.color_toggle = self.central.system_prompt, self.central.color_toggle
        self.inspector = InspectorWidget()
        self.timeline = TimelineWidget()
        self.panel = SamplingPanel(self.settings)
        self.controls = self.panel.controls
        docks = add_docks(self, self.inspector, self.timeline, self.panel)
        self.inspector_dock, self.timeline_dock, self.controls_dock = docks
        self.docks = Docks(self, *docks, self.panel, self.inspector, self.timeline, self.chat)
        set_minimum_sizes(self.docks)
        self.dock_memory = DockMemory(self.docks)  # docks squeezed by a small window grow back

    def _connect_model(self) -> None:
        model, events = self.model, self.model.events
        self.commands = ChatCommands(
            model, self.in_use, self.status, self.settings, (self.central, self.panel, self.inspector)
        )
        for view in (self.chat, self.inspector, self.timeline):
            view.bind(model, self.clock)
        events.status.connect(self.status.show_message)
        events.errored.connect(self.show_exception)
        self.status.bind(model)  # the reply's speed: live while it streams, the engine's after
        events.busy_changed.connect(self._on_busy_changed)
        events.entries_changed.connect(self._update_buttons)
        events.conversation_changed.connect(self._on_conversation_changed)
        self.chat.token_clicked.connect(model.select)
        self.chat.branch_stepped.connect(model.step_branch)
        self.chat.keep_requested.connect(model.keep_column)
        self.chat.compare_shown.connect(model.show_compare)
        self.system_prompt.editingFinished.connect(self._on_system_prompt)
        self.central.stop_button.clicked.connect(self.stop)
        # A saved reply (stream_renamed) and the end of a reply change what an analysis may read.
        for name in ("selection_changed", "entries_changed", "conversation_changed", "busy_changed", "stream_renamed"):
            getattr(events, name).connect(self.actions.refresh_after)

    def _build_controllers(self) -> None:
        """Each controller with the context and what else it needs; then the menus, from
        their actions."""
        context = self.context
        self.loader = ModelLoader(context, self.panel, self.composer, self.stop, self.close_error)
        self.library = LibraryController(context, self.load_model)  # Models → Library…
        self.precision = PrecisionMenu(context, self.load_model)  # Models → Precision ▸
        self.kv_cache = KVCacheMenu(context, self.load_model)  # Models → KV cache ▸
        views = (self.timeline, self.inspector, self.panel, self.color_toggle, self.clock)
        self.scoring = ScoreActions(
            context, ScoreParts(*views, self.open_conversation, self.load_model)
        )  # Score text, replay, exports and imports
        # The analyses of a reply (app/shell/controllers/analysis_controller.py) and those read from its steps.
        self.precision_check = PrecisionCheck(context, self.precision.choose)  # Models → Check precision…
        self.compare_models = CompareModels(  # Models → Compare models…
            context, self.timeline, self.inspector, lambda: recent_models(self.settings)
        )
        self.logit_lens = LogitLensController(  # the inspector's Layers tab, the decided-at row
            context, self.timeline, self.inspector, self.inspector_dock, self.clock
        )
        self.step_analyses = step_analyses(context, self.timeline, self.clock)  # surprise, …
        acceptance = next(c.action for c in self.step_analyses if isinstance(c.analysis, DraftAcceptance))
        self.draft = DraftModelController(context, lambda: recent_models(self.settings), acceptance)
        place_served = partial(tabbed_dock, self, self.controls_dock)
        self.serving = ServingController(context, place_served, self.open_conversation)  # Server ▸
        self.analysis_actions = analysis_actions(
            self.actions, self.precision_check, self.compare_models, self.logit_lens, self.step_analyses
        )
        docks = (self.inspector_dock, self.timeline_dock, self.controls_dock)
        toggles = Toggles(self.panel, self.composer, self.color_toggle, docks)
        self.window_actions = WindowActions(context, self, toggles)
        build_menus(
            self.menuBar(),
            MenuParts(
                self.window_actions,
                self.scoring,
                self.loader,
                self.library,
                self.precision,
                self.kv_cache,
                self.analysis_actions,
                self.draft.action,
                self.serving,
            ),
        )

    def _connect_worker(self) -> None:
        worker = self.engine.worker
        worker.prefill_progressed.connect(self._on_prefill)  # a method of this QObject: queued
        worker.job_finished.connect(self._on_job_ended)
        worker.job_rejected.connect(self._on_job_ended)
        # After the loader's own slots: the model in use is the new one when these run.
        worker.model_loaded.connect(self._on_model_loaded)
        worker.model_failed.connect(self._on_model_failed)
        worker.errored.connect(self.show_exception)

    # Settings --------------------------------------------------------------------------------

    def set_theme(self, name: str) -> None:
        colors = apply_theme(QApplication.instance(), name)
        self.window_actions.check_theme(name)
        self.settings.setValue("theme", name)
        self.central.set_colors(colors)
        self.inspector.set_colors(colors)
        self.timeline.set_colors(colors)
        self.panel.set_colors(colors)

    # Models (app/shell/controllers/model_loading.py) ----------------------------------------------------------------

    def load_model(self, source: str) -> None:
        """Load ``source``; during a reply, ask first (stop it and load, load after it, cancel)."""
        self.loader.load(source)

    def open_connect_dialog(self):
        """Models → Connect to a server… (``app/views/connect_dialog.py``)."""
        return self.loader.open_connect_dialog()

    def connect_remote(self, spec) -> None:
        """Use the server of ``spec`` (an ``app.model.remote_jobs.RemoteSpec``) from now on."""
        self.loader.connect_remote(spec)

    # Commands ------------------------------------------------------------------------------------

    def busy(self) -> bool:
        return self.model.busy()

    @property
    def model_info(self):
        """The worker's ``ModelInfo`` of the model in use; None until one has loaded."""
        return self.in_use.info

    @property
    def model_source(self) -> str | None:
        """The model asked for last (loaded, or loading)."""
        return self.in_use.source

    @property
    def journal(self) -> StreamJournal:
        return self.saving.journal

    @property
    def save_error(self) -> str:
        """Why the last write failed; empty while saving works."""
        return self.saving.save_error

    def score_controller(self) -> ScoreController:
        """Score text, replay, export and import (``app/shell/controllers/score_dialog.py``), made at first use."""
        return self.scoring.controller()

    # The chat's commands (app/shell/controllers/chat_commands.py), by their names here for the actions.

    def send(self) -> None:
        self.commands.send()

    def regenerate(self) -> None:
        self.commands.regenerate()

    def stop(self) -> None:
        self.precision_check.cancel()
        self.compare_models.cancel()
        self.logit_lens.cancel(by_user=True)
        if self.model.busy():
            self.status.stopping()  # at once: the engine stops at its next chunk or token
        self.model.generation.stop()
        self.actions.refresh()  # an analysis stopped: its item is enabled again

    def working(self) -> bool:
        """Whether Stop (Esc) has something to stop: a reply, a scored text, a replay or an
        analysis of a reply."""
        analyses = (self.precision_check, self.compare_models, self.logit_lens)
        return self.model.busy() or any(c.analysis.running is not None for c in analyses)

    def pick_token(self, token_id: int | None, text: str | None = None) -> None:
        self.commands.pick_token(token_id, text)

    def compare_from_here(self, ref: TokenRef) -> None:
        self.commands.compare_from_here(ref)

    def new_chat(self) -> None:
        self.model.new_chat()
        self.composer.setFocus()

    def focus_composer(self) -> None:
        self.composer.setFocus()

    def reset_layout(self) -> None:
        """View → Reset layout (``app/shell/layout.py``)."""
        reset_layout(self.docks, self.status)

    def open_conversation(self, conversation_id: int) -> None:
        if self.model.open_conversation(conversation_id):
            # Reading a long conversation makes many objects at once; collect now, while the
            # user waits for it, rather than in a full collection in the middle of a reply.
            gc.collect()
            self.composer.setFocus()

    def select_token(self, ref: TokenRef) -> None:
        self.model.select(ref)

    # Model and worker events ------------------------------------------------------------------------

    def _on_prefill(self, tag: int, done: int, total: int) -> None:
        self.status.prefill_progressed(tag, done, total)

    def _on_job_ended(self, tag: int, _end: object) -> None:
        self.status.request_ended(tag)  # its prefill, if the bar shows it, is over

    def _on_model_loaded(self, _info) -> None:
        # The actions follow the new backend's capabilities already (ModelLoading._on_loaded).
        self.precision.sync()
        self.kv_cache.sync()

    def _on_model_failed(self, source: str, _exc: BaseException) -> None:
        self.kv_cache.revert_after_failure(source)  # a refused KV setting: the menu says what runs

    def _on_conversation_changed(self, conversation) -> None:
        self.system_prompt.setText(self.model.system_prompt)
        if conversation is not None:
            self.settings.setValue("conversation", conversation.id)

    def _on_system_prompt(self) -> None:
        if not self._closed:
            self.model.set_system_prompt(self.system_prompt.text())

    def _on_busy_changed(self, busy: bool) -> None:
        self._update_buttons()
        if not busy:
            self.status.stopped()
            self.central.reclaim_focus()  # Enter sends the next message

    def _update_buttons(self) -> None:
        self.central.set_busy(self.model.busy(), self.model.last_assistant() is not None)

    def _redraw_if_dirty(self) -> None:
        """Run every view's pending redraw now (tests and screenshots)."""
        self.clock.flush()

    @property
    def redraws(self) -> int:
        return self.chat.flushes.runs

    @property
    def entries(self):
        return self.model.entries

    @property
    def thread_messages(self):
        return self.model.thread

    def focusNextPrevChild(self, next: bool) -> bool:  # noqa: A002, N802 (Qt's names)
        """Tab and Shift+Tab: the window's own order (``app/shell/tab_order.py``)."""
        stops = tab_order(self.central, self.panel, self.inspector, self.timeline)
        return focus_next(self, stops, next) or super().focusNextPrevChild(next)

    def show_exception(self, exc: BaseException) -> None:
        """An error from the worker: a parameter the engine refused is outlined in the panel too."""
        if isinstance(exc, SamplingParamsError):
            self.controls.show_error(exc)
        self.show_error(describe(exc), exc)

    def show_error(self, message: str, exc: BaseException | None = None) -> None:
        """A window-modal error box; what it says (and ``exc``'s traceback) goes to the log too."""
        note_error(message, exc)
        self.last_error = message
        box = QMessageBox(QMessageBox.Icon.Critical, "Logitscope", message, parent=self)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()
        self.error_box = box

    def close_error(self) -> None:
        """Close the error box shown last, if it is still open."""
        if self.error_box is not None and self.error_box.isVisible():
            self.error_box.close()

    # About and closing ------------------------------------------------------------------------------

    def show_about(self) -> None:
        from app.views.about import about_box

        self.about_box = about_box(self, self.model_info)

    def closeEvent(self, event) -> None:
        if not self._closed:
            self._on_system_prompt()
            self._closed = True
            self.clock.timer.stop()
            colour = self.scoring.colour_choice(self.color_toggle.isChecked())
            save_settings(self.docks, self.settings, colour, self.model)
            if self.window_actions.help_window is not None:  # a window of its own: it goes with the app
                self.window_actions.help_window.close()
            self.compare_models.cancel()  # its generator is closed before the engine's thread ends
            self.logit_lens.cancel()  # likewise
            # From here the worker's reports are not applied: the store closes below, and what
            # was streaming (a served reply too) is in the stream journal for the next start.
            self.link.detach()
            self.serving.stop()  # its clients get the end of their replies; then the engine stops
            started = time.perf_counter()
            self.engine.stop()
            self.shutdown_seconds = time.perf_counter() - started
            for view in (self.chat, self.inspector, self.timeline):
                self.model.events.disconnect_owner(view)
            self.serving.close()  # the served requests' writes submitted are done
            self.background.wait()  # replies whose steps are still being serialized
            self.journal.close()
            self.store.close()
        super().closeEvent(event)
