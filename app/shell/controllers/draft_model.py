"""Models → Draft model…: speculative decoding from the GUI thread.

``DraftModelController`` owns the action, the dialog (``app.views.draft_dialog``), the
:class:`app.shell.engine_thread.draft_runner.DraftRunner` moved to the engine's thread, and a status-bar
label naming the draft in use. The draft chosen is saved per running model
(``app.model.draft.DraftChoices``) and loaded again after that model loads; a refusal (another
vocabulary, caches that cannot be cut back, not enough memory) reaches the dialog and the
status bar in the engine's words, and the running model and its draft stay as they were.
Once a draft is in use the timeline's acceptance row is switched on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel

from app.model.draft import DraftChoice, DraftChoices
from app.model.precision import model_label
from app.shell.engine_thread.draft_runner import DraftCancelled, DraftRunner
from app.shell.engine_thread.worker import describe
from app.views.draft_dialog import DraftModelDialog

if TYPE_CHECKING:
    from app.shell.context import ShellContext
    from engine.api.draft import DraftModel

ACTION_TIP = (
    "A smaller model with the same vocabulary proposes tokens for the running model to check in one "
    "pass (speculative decoding): the same replies, each token showing what the draft proposed."
)
NO_MODEL = "Load a model first: a draft proposes to the model that runs."


def in_use_words(held: DraftModel) -> str:
    return f"Draft in use: {held.name} ({held.precision}), {held.tokens} tokens per block."


class DraftModelController(QObject):
    request_load = Signal(int, str, str, int)  # tag, source, precision, tokens
    request_release = Signal()

    def __init__(
        self, context: ShellContext, recent: Callable[[], list[str]], acceptance: QAction | None = None
    ) -> None:
        """``recent``: the models loaded lately (offered); ``acceptance``: the timeline row's
        action, switched on once a draft is in use."""
        super().__init__(context.parent)
        self.context, self._recent, self._acceptance = context, recent, acceptance
        self.choices = DraftChoices(context.settings)
        engine = context.link.engine
        self.runner = DraftRunner(engine.worker)
        self.runner.moveToThread(engine.thread)
        self.request_load.connect(self.runner.load)
        self.request_release.connect(self.runner.release)
        self.runner.loading.connect(self._on_loading)
        self.runner.loaded.connect(self._on_loaded)
        self.runner.failed.connect(self._on_failed)
        self.runner.released.connect(self._on_released)
        engine.worker.model_loaded.connect(self._on_model_loaded)
        self.held: DraftModel | None = None
        self.dialog: DraftModelDialog | None = None
        self.label = QLabel("")
        context.status.bar.addPermanentWidget(self.label)
        self._tag = 0
        self._target = ""  # the running model the load in progress is for
        self._choice: DraftChoice | None = None
        self.action = context.actions.add(
            "Draft model…",
            self.open_dialog,
            capability="draft",
            needs=lambda: "" if context.in_use.info is not None else NO_MODEL,
            tooltip=ACTION_TIP,
            status_tip=ACTION_TIP,
            prefix="",
        )

    # The dialog -----------------------------------------------------------------------------------

    def open_dialog(self) -> DraftModelDialog | None:
        info = self.context.in_use.info
        if info is None:
            self.context.status.show_message(f"Draft model: {NO_MODEL}", 8000)
            return None
        if self.dialog is not None:
            self.dialog.close()
            self.dialog.deleteLater()
        sources = list(dict.fromkeys(["default", *self._recent()]))
        words = in_use_words(self.held) if self.held is not None else ""
        self.dialog = DraftModelDialog(
            model_label(info),
            sources,
            self.choices.get(info.source),
            words,
            self.context.parent,
            self.context.folders,
            device=info.device,
        )
        self.dialog.use_requested.connect(self.use)
        self.dialog.release_requested.connect(self.release)
        self.dialog.cancel_requested.connect(self.cancel)
        self.dialog.open()
        return self.dialog

    def use(self, choice: DraftChoice) -> None:
        """Load ``choice`` as the running model's draft (saved for it once it is in use)."""
        info = self.context.in_use.info
        if info is None or not choice.source:
            return
        self._tag += 1
        self._target, self._choice = info.source, choice
        if self.dialog is not None:
            self.dialog.show_started(choice)
        self.context.status.show_message(f"Loading the draft model {choice.source}…", 8000)
        self.request_load.emit(self._tag, choice.source, choice.precision, choice.tokens)

    def release(self) -> None:
        info = self.context.in_use.info
        if info is not None:
            self.choices.set(info.source, None)
        self.request_release.emit()

    def cancel(self) -> None:
        self.runner.cancel(self._tag)  # thread-safe: the load stops at its next report

    # The runner's reports ---------------------------------------------------------------------------

    @Slot(int, str, float)
    def _on_loading(self, tag: int, stage: str, fraction: float) -> None:
        if tag == self._tag and self.dialog is not None:
            self.dialog.show_loading(stage, fraction, "the draft model")

    @Slot(int, object)
    def _on_loaded(self, tag: int, held: Any) -> None:
        self._hold(held)
        if tag == self._tag and self._choice is not None:
            self.choices.set(self._target, self._choice)
        words = in_use_words(held)
        self.context.status.show_message(words, 8000)
        if self.dialog is not None:
            self.dialog.show_in_use(words)
        if self._acceptance is not None and not self._acceptance.isChecked():
            self._acceptance.setChecked(True)

    @Slot(int, object)
    def _on_failed(self, tag: int, exc: BaseException) -> None:
        if isinstance(exc, DraftCancelled):
            if self.dialog is not None:
                self.dialog.show_cancelled()
            self.context.status.show_message("Draft model: cancelled.", 6000)
            return
        message = describe(exc)
        if self.dialog is not None and tag == self._tag:
            self.dialog.show_refused(message)
        self.context.status.show_message(f"Draft model refused: {message}", 15_000)

    @Slot()
    def _on_released(self) -> None:
        self._hold(None)
        if self.dialog is not None:
            self.dialog.show_in_use("")
        self.context.status.show_message("No draft: the running model decodes alone.", 6000)

    def _hold(self, held: DraftModel | None) -> None:
        """The draft in use, and the status bar's label naming it."""
        self.held = held
        self.label.setText(f"draft: {held.name} ×{held.tokens}" if held is not None else "")
        self.label.setToolTip(in_use_words(held) if held is not None else "")

    def _on_model_loaded(self, info: Any) -> None:
        """Another running model has no draft until one is loaded for it: the one saved for it."""
        self._hold(None)
        saved = self.choices.get(info.source) if info.capabilities.draft else None
        if saved is not None:
            self.use(saved)
