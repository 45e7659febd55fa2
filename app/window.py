"""The main window: chat in the centre, inspector, timeline and sampling controls in docks."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import platformdirs
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.chat_view import ChatView, color_legend
from app.controls import SamplingControls
from app.conversation import (
    ChatEntry,
    LiveReply,
    build_entries,
    context_before,
    last_assistant_index,
    latest_token,
    message_of_entry,
)
from app.inspector import InspectorWidget
from app.store import Message, Store
from app.theme import apply_theme
from app.timeline import TimelineWidget
from app.worker import ChatJob, WorkerThread, describe
from engine.events import Finished, TokenStep
from engine.params import SamplingParams, SamplingParamsError

DEFAULT_SYSTEM = "You are a helpful assistant."
FIRST_PROMPT = "What is the capital of France?"
REDRAW_MS = 33  # at most ~30 redraws a second, however fast tokens arrive
MAX_RECENT = 8


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class MainWindow(QMainWindow):
    request_load = Signal(str)
    request_submit = Signal(object)
    request_cancel = Signal(int)
    request_update = Signal(int, object)

    def __init__(
        self,
        db_path: str | Path | None = None,
        settings: QSettings | None = None,
        model: str | None = None,
        session_factory=None,
    ) -> None:
        super().__init__()
        self.setWindowTitle("Logitscope")
        from app.resources import app_icon

        self.setWindowIcon(app_icon())
        self.settings = settings or QSettings("Logitscope", "Logitscope")
        data_dir = Path(platformdirs.user_data_dir("logitscope"))
        self.store = Store(db_path or data_dir / "logitscope.sqlite3")
        self.live: dict[int, LiveReply] = {}
        self._next_tag = 1
        self.entries: list[ChatEntry] = []
        self.thread_messages: list[Message] = []
        self.selected: tuple[int, int] | None = None
        self.follow_latest = True
        self.model_info = None
        self.model_source: str | None = None
        self.conversation = None
        self.redraws = 0
        self.last_error = ""
        self._dirty = False
        self._closed = False

        self._build_widgets()
        self._build_docks()
        self._build_menus()
        self._build_status()
        self._connect_worker(session_factory)
        self._restore_settings()

        self.redraw_timer = QTimer(self)
        self.redraw_timer.setInterval(REDRAW_MS)
        self.redraw_timer.timeout.connect(self._redraw_if_dirty)
        self.redraw_timer.start()

        self._open_last_conversation()
        if self.conversation is None:
            self.composer.setPlainText(FIRST_PROMPT)
            self._rebuild_entries()
        self.load_model(model or self.settings.value("model", "default"))

    # Construction -------------------------------------------------------------------

    def _build_widgets(self) -> None:
        self.system_prompt = QLineEdit(DEFAULT_SYSTEM)
        self.system_prompt.setPlaceholderText("System prompt (empty: none)")
        self.system_prompt.editingFinished.connect(self._on_system_prompt)
        self.chat = ChatView()
        self.chat.token_clicked.connect(self.select_token)
        self.chat.branch_stepped.connect(self._on_branch_stepped)
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.color_toggle = QCheckBox("Colour tokens by probability")
        self.color_toggle.toggled.connect(self._on_color_toggled)
        self.composer = Composer()
        self.composer.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self.composer.setFixedHeight(80)
        self.composer.submitted.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.clicked.connect(self.regenerate)

        top = QHBoxLayout()
        top.addWidget(QLabel("System"))
        top.addWidget(self.system_prompt, 1)
        legend_row = QHBoxLayout()
        legend_row.addWidget(self.color_toggle)
        legend_row.addWidget(self.legend, 1)
        buttons = QVBoxLayout()
        for button in (self.send_button, self.stop_button, self.regen_button):
            buttons.addWidget(button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.composer, 1)
        bottom.addLayout(buttons)
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.addLayout(top)
        layout.addWidget(self.chat, 1)
        layout.addLayout(legend_row)
        layout.addLayout(bottom)
        self.setCentralWidget(central)

    def _dock(self, title: str, name: str, widget: QWidget, area) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_docks(self) -> None:
        self.inspector = InspectorWidget()
        self.inspector.token_picked.connect(self.pick_token)
        self.timeline = TimelineWidget()
        self.timeline.token_selected.connect(self._on_timeline_selected)
        self.controls = SamplingControls(self.settings)
        self.controls.params_changed.connect(self._on_params_changed)
        self.inspector.token_banned.connect(self.controls.ban_token)
        right, bottom, left = (
            Qt.DockWidgetArea.RightDockWidgetArea,
            Qt.DockWidgetArea.BottomDockWidgetArea,
            Qt.DockWidgetArea.LeftDockWidgetArea,
        )
        self.inspector_dock = self._dock("Inspector", "inspector", self.inspector, right)
        self.timeline_dock = self._dock("Timeline", "timeline", self.timeline, bottom)
        self.controls_dock = self._dock("Sampling", "sampling", self.controls, left)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self._action(file_menu, "New chat", self.new_chat, QKeySequence.StandardKey.New)
        self.conversations_menu = file_menu.addMenu("Open conversation")
        self.conversations_menu.aboutToShow.connect(self._fill_conversations)
        self._action(file_menu, "Delete this conversation", self.delete_conversation)
        file_menu.addSeparator()
        self._action(file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit)

        chat_menu = bar.addMenu("&Chat")
        self._action(chat_menu, "Send", self.send)
        self._action(chat_menu, "Stop", self.stop, QKeySequence(Qt.Key.Key_Escape))
        self._action(chat_menu, "Regenerate", self.regenerate, QKeySequence("Ctrl+R"))

        model_menu = bar.addMenu("&Models")
        self._action(model_menu, "Default model (SmolLM2-135M-Instruct)", lambda: self.load_model("default"))
        self._action(model_menu, "Open model folder…", self._open_folder)
        self._action(model_menu, "Open GGUF file…", self._open_gguf)
        self._action(model_menu, "Hugging Face repo id…", self._open_repo)
        self.recent_menu = model_menu.addMenu("Recent models")
        self.recent_menu.aboutToShow.connect(self._fill_recent)

        view_menu = bar.addMenu("&View")
        theme_menu = view_menu.addMenu("Theme")
        self.theme_group = QActionGroup(self)
        for name in ("system", "light", "dark"):
            action = QAction(name.capitalize(), self, checkable=True)
            action.triggered.connect(lambda _=False, n=name: self.set_theme(n))
            self.theme_group.addAction(action)
            theme_menu.addAction(action)
        view_menu.addAction(self.color_toggle_action())
        for dock in (self.inspector_dock, self.timeline_dock, self.controls_dock):
            view_menu.addAction(dock.toggleViewAction())

        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "About Logitscope", self.show_about)

    def color_toggle_action(self) -> QAction:
        action = QAction("Colour tokens by probability", self, checkable=True)
        action.toggled.connect(self.color_toggle.setChecked)
        self.color_toggle.toggled.connect(action.setChecked)
        return action

    def _action(self, menu, text, slot, shortcut=None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(lambda _=False: slot())
        menu.addAction(action)
        return action

    def _build_status(self) -> None:
        status = self.statusBar()
        self.model_label = QLabel("No model")
        self.speed_label = QLabel("")
        self.memory_label = QLabel("")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setRange(0, 100)
        self.progress.setTextVisible(True)
        self.progress.hide()
        for widget in (self.model_label, self.speed_label, self.progress, self.memory_label):
            status.addPermanentWidget(widget)

    def _connect_worker(self, session_factory) -> None:
        self.engine = WorkerThread(session_factory)
        worker = self.engine.worker
        self.request_load.connect(worker.load_model)
        self.request_submit.connect(worker.submit)
        self.request_cancel.connect(worker.cancel)
        self.request_update.connect(worker.update_params)
        worker.model_progressed.connect(self._on_model_progress)
        worker.model_loaded.connect(self._on_model_loaded)
        worker.model_failed.connect(self._on_model_failed)
        worker.job_started.connect(self._on_job_started)
        worker.job_rejected.connect(self._on_job_rejected)
        worker.token_sampled.connect(self._on_token)
        worker.prefill_progressed.connect(self._on_prefill)
        worker.job_finished.connect(self._on_finished)
        worker.memory_measured.connect(self._on_memory)
        worker.errored.connect(self.show_exception)

    # Settings -------------------------------------------------------------------------

    def _restore_settings(self) -> None:
        geometry = self.settings.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 860)
        state = self.settings.value("window_state")
        if state is not None:
            self.restoreState(state)
        else:
            self.resizeDocks([self.inspector_dock], [600], Qt.Orientation.Horizontal)
            self.resizeDocks([self.timeline_dock], [200], Qt.Orientation.Vertical)
        params = self.settings.value("params")
        if isinstance(params, str):
            with contextlib.suppress(ValueError, TypeError):
                self.controls.set_params(SamplingParams.from_dict(json.loads(params)))
        self.color_toggle.setChecked(self.settings.value("color_tokens", "false") == "true")
        self.set_theme(str(self.settings.value("theme", "system")))

    def _save_settings(self) -> None:
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("window_state", self.saveState())
        self.settings.setValue("params", json.dumps(self.controls.current.to_dict()))
        self.settings.setValue("color_tokens", "true" if self.color_toggle.isChecked() else "false")
        if self.conversation is not None:
            self.settings.setValue("conversation", self.conversation.id)
        self.settings.sync()

    def set_theme(self, name: str) -> None:
        app = QApplication.instance()
        colors = apply_theme(app, name)
        for action in self.theme_group.actions():
            action.setChecked(action.text().lower() == name)
        self.settings.setValue("theme", name)
        self.chat.colors = colors
        self.inspector.set_colors(colors)
        self.timeline.set_colors(colors)
        self.legend.setText(color_legend(colors) if self.color_toggle.isChecked() else "")
        self._dirty = True

    # Models ----------------------------------------------------------------------------

    def load_model(self, source: str) -> None:
        self.model_source = source
        self.model_label.setText(f"Loading {source}…")
        self.progress.setFormat("loading %p%")
        self.progress.setValue(0)
        self.progress.show()
        self.request_load.emit(source)

    def _on_model_progress(self, stage: str, fraction: float) -> None:
        self.progress.setValue(int(fraction * 100))
        self.statusBar().showMessage(f"Model: {stage}…")
        if not self.thread_messages:
            self._rebuild_entries()

    def _on_model_loaded(self, info) -> None:
        self.model_info = info
        self.model_label.setText(info.name)
        self.progress.hide()
        self.statusBar().showMessage(f"Loaded {info.name}", 4000)
        self.settings.setValue("model", info.source)
        recent = [info.source] + [r for r in self._recent() if r != info.source]
        self.settings.setValue("recent_models", json.dumps(recent[:MAX_RECENT]))
        if not self.thread_messages:
            self._rebuild_entries()

    def _on_model_failed(self, source: str, exc: BaseException) -> None:
        self.progress.hide()
        name = self.model_info.name if self.model_info else "No model"
        self.model_label.setText(name)
        self.show_error(f"Could not load {source}.\n\n{describe(exc)}")

    def _recent(self) -> list[str]:
        try:
            return list(json.loads(self.settings.value("recent_models", "[]")))
        except (TypeError, ValueError):
            return []

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        for source in self._recent():
            action = self.recent_menu.addAction(source)
            action.triggered.connect(lambda _=False, s=source: self.load_model(s))

    def _open_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open mlx-lm model folder")
        if folder:
            self.load_model(folder)

    def _open_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open GGUF file", "", "GGUF models (*.gguf)")
        if path:
            self.load_model(path)

    def _open_repo(self) -> None:
        repo, ok = QInputDialog.getText(
            self, "Hugging Face model", "Repo id (e.g. mlx-community/SmolLM2-360M-Instruct):"
        )
        if ok and repo.strip():
            self.load_model(repo.strip())

    # Conversations -----------------------------------------------------------------------

    def _open_last_conversation(self) -> None:
        last = self.settings.value("conversation")
        conversation = self.store.conversation(int(last)) if last is not None else None
        if conversation is not None:
            self.open_conversation(conversation.id)

    def open_conversation(self, conversation_id: int) -> None:
        self.stop()
        self.conversation = self.store.conversation(conversation_id)
        self.system_prompt.setText(self.conversation.system_prompt)
        self.settings.setValue("conversation", conversation_id)
        self.selected = None
        self.follow_latest = True
        self._reload_thread()

    def new_chat(self) -> None:
        self.stop()
        self.conversation = None
        self.thread_messages = []
        self.selected = None
        self.follow_latest = True
        self._rebuild_entries()
        self.composer.setFocus()

    def delete_conversation(self) -> None:
        if self.conversation is not None:
            self.store.delete_conversation(self.conversation.id)
            self.new_chat()

    def _fill_conversations(self) -> None:
        self.conversations_menu.clear()
        for conversation in self.store.conversations()[:30]:
            action = self.conversations_menu.addAction(conversation.title)
            action.triggered.connect(lambda _=False, c=conversation.id: self.open_conversation(c))

    def _on_system_prompt(self) -> None:
        if self.conversation is not None and not self._closed:
            self.store.update_conversation(self.conversation.id, system_prompt=self.system_prompt.text())

    # Chat --------------------------------------------------------------------------------

    def busy(self) -> bool:
        return bool(self.live)

    def send(self) -> None:
        text = self.composer.toPlainText().strip()
        if not text:
            return
        if self.model_info is None:
            self.statusBar().showMessage("The model is still loading.", 4000)
            return
        if self.busy():
            self.statusBar().showMessage("A reply is still being written: stop it first (Esc).", 4000)
            return
        if self.conversation is None:
            title = text.splitlines()[0][:60]
            self.conversation = self.store.new_conversation(self.system_prompt.text(), title)
            self.settings.setValue("conversation", self.conversation.id)
        last = self.thread_messages[-1] if self.thread_messages else None
        after_branch = last.branch.id if last is not None and last.branch is not None else None
        user = self.store.add_user_message(self.conversation.id, text, after_branch)
        reply = self.store.add_assistant_message(self.conversation.id, user.id)
        self.composer.clear()
        self._reload_thread()
        self._start(reply.id, self._context_before(len(self.thread_messages) - 1))

    def regenerate(self) -> None:
        if self.busy() or self.model_info is None:
            return
        index = self._last_assistant_index()
        if index is None:
            return
        self._start(self.thread_messages[index].id, self._context_before(index))

    def stop(self) -> None:
        for tag in list(self.live):
            self.request_cancel.emit(tag)

    def _last_assistant_index(self) -> int | None:
        return last_assistant_index(self.thread_messages)

    def _context_before(self, message_index: int) -> tuple[dict[str, str], ...]:
        return context_before(self.thread_messages, message_index, self.system_prompt.text().strip())

    def _start(self, message_id, messages, prefix=(), forced=None) -> int:
        tag = self._next_tag
        self._next_tag += 1
        params = self.controls.current
        self.live[tag] = LiveReply(message_id, params, prefix=list(prefix))
        output = tuple(s.token_id for s in prefix)
        self.request_submit.emit(ChatJob(tag, messages, params, output, forced))
        self.follow_latest = True
        self._rebuild_entries()
        return tag

    def pick_token(self, token_id: int) -> None:
        """Continue the selected reply from the selected token, with ``token_id`` instead."""
        if self.selected is None or self.model_info is None:
            return
        entry_index, token_index = self.selected
        message = self._message_of_entry(entry_index)
        if message is None or message.role != "assistant":
            return
        steps = self.entries[entry_index].steps
        for tag, live in list(self.live.items()):
            if live.message_id == message.id:
                self.request_cancel.emit(tag)
        prefix = steps[:token_index]
        context = self._context_before(self.thread_messages.index(message))
        self._start(message.id, context, prefix=prefix, forced=token_id)
        self.statusBar().showMessage("Continuing from the picked token; the earlier reply is kept as a branch.", 5000)

    def _message_of_entry(self, entry_index: int) -> Message | None:
        return message_of_entry(self.entries, self.thread_messages, entry_index)

    def _on_branch_stepped(self, entry_index: int, delta: int) -> None:
        message = self._message_of_entry(entry_index)
        if message is None or not message.branches or self.busy():
            return
        new = (message.active + delta) % len(message.branches)
        self.store.set_active_branch(message.id, message.branches[new].id)
        self._reload_thread()

    # Worker events ---------------------------------------------------------------------------

    def _on_job_started(self, tag: int, request_id: int, prompt_tokens: int) -> None:
        if tag in self.live:
            self.live[tag].request_id = request_id
        self.statusBar().showMessage(f"Prompt: {prompt_tokens} tokens", 3000)

    def _on_job_rejected(self, tag: int, exc: BaseException) -> None:
        self.live.pop(tag, None)
        self._rebuild_entries()
        self.show_exception(exc)

    def _on_token(self, tag: int, step: TokenStep) -> None:
        live = self.live.get(tag)
        if live is None:
            return
        live.steps.append(step)
        if len(live.steps) > 1 and step.params != live.steps[-2].params:
            self.statusBar().showMessage(f"New parameters in force from token {step.index}.", 4000)
        self._dirty = True

    def _on_prefill(self, tag: int, done: int, total: int) -> None:
        if done >= total:
            self.progress.hide()
            return
        self.progress.setFormat(f"prefill {done}/{total}")
        self.progress.setValue(int(100 * done / max(total, 1)))
        self.progress.show()

    def _on_finished(self, tag: int, finished: Finished) -> None:
        live = self.live.pop(tag, None)
        self.progress.hide()
        if live is None:
            return
        name = self.model_info.name if self.model_info else "?"
        if live.steps or finished.finish_reason != "cancelled":
            self.store.add_branch(
                live.message_id,
                live.all_steps,
                finished.text,
                finished.finish_reason,
                name,
                live.params,
            )
        self.speed_label.setText(
            f"prompt {finished.prompt_tps:.1f} tok/s · generation {finished.generation_tps:.1f} tok/s"
        )
        self._reload_thread()

    def _on_memory(self, nbytes: int) -> None:
        self.memory_label.setText(f"memory {nbytes / 2**20:.0f} MiB")

    def _on_params_changed(self, params: SamplingParams) -> None:
        self.settings.setValue("params", json.dumps(params.to_dict()))
        # Each branch keeps the parameters it started with; its TokenSteps record every change.
        for tag in self.live:
            self.request_update.emit(tag, params)
        if self.live:
            self.statusBar().showMessage("Parameters changed: they apply from the next token.", 4000)

    def show_exception(self, exc: BaseException) -> None:
        """An error from the worker: a parameter the engine refused is outlined in the panel too."""
        if isinstance(exc, SamplingParamsError):
            self.controls.show_error(exc)
        self.show_error(describe(exc))

    def show_error(self, message: str) -> None:
        self.last_error = message
        box = QMessageBox(QMessageBox.Icon.Critical, "Logitscope", message, parent=self)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()
        self.error_box = box

    # Views -----------------------------------------------------------------------------------

    def _reload_thread(self) -> None:
        self.thread_messages = self.store.thread(self.conversation.id) if self.conversation is not None else []
        self._rebuild_entries()

    def _rebuild_entries(self) -> None:
        self.entries = build_entries(
            self.thread_messages, list(self.live.values()), self.system_prompt.text().strip(), self._welcome_state()
        )
        if self.follow_latest:
            self.selected = self._latest_token()
        self._dirty = True

    def _welcome_state(self) -> str:
        if self.model_info is None:
            return f"Loading the model ({self.progress.value()}%)…"
        return f"{self.model_info.name} is ready: press Enter to send the question below."

    def _latest_token(self) -> tuple[int, int] | None:
        return latest_token(self.entries)

    def select_token(self, entry: int, index: int) -> None:
        self.selected = (entry, index)
        self.follow_latest = self.selected == self._latest_token() and self.busy()
        self._dirty = True
        self._redraw_if_dirty()

    def _on_timeline_selected(self, index: int) -> None:
        if self.selected is not None:
            self.select_token(self.selected[0], index)

    def selected_step(self) -> TokenStep | None:
        if self.selected is None:
            return None
        entry, index = self.selected
        try:
            return self.entries[entry].steps[index]
        except IndexError:
            return None

    def _on_color_toggled(self, on: bool) -> None:
        self.chat.color_tokens = on
        self.legend.setText(color_legend(self.chat.colors) if on else "")
        self._dirty = True

    def _redraw_if_dirty(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        if self.live:
            live_by_message = {live.message_id: live for live in self.live.values()}
            for entry_index, entry in enumerate(self.entries):
                message = self._message_of_entry(entry_index)
                if message is not None and entry.streaming and message.id in live_by_message:
                    entry.steps = live_by_message[message.id].all_steps
            if self.follow_latest:
                self.selected = self._latest_token()
        self.redraws += 1
        self.chat.show_entries(self.entries, self.selected)
        step = self.selected_step()
        self.inspector.show_step(step)
        steps = self.entries[self.selected[0]].steps if self.selected else []
        self.timeline.set_steps(steps, self.selected[1] if self.selected else None)
        busy = self.busy()
        self.stop_button.setEnabled(busy)
        self.regen_button.setEnabled(not busy and self._last_assistant_index() is not None)

    # About and closing ------------------------------------------------------------------------

    def show_about(self) -> None:
        from app.about import about_text
        from app.resources import app_icon

        box = QMessageBox(self)
        box.setWindowTitle("About Logitscope")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(about_text(self.model_info))
        box.setIconPixmap(app_icon().pixmap(96, 96))
        box.open()
        self.about_box = box

    def closeEvent(self, event) -> None:
        if not self._closed:
            self._on_system_prompt()
            self._closed = True
            self.redraw_timer.stop()
            self._save_settings()
            started = time.perf_counter()
            self.engine.stop()
            self.shutdown_seconds = time.perf_counter() - started
            self.store.close()
        super().closeEvent(event)
