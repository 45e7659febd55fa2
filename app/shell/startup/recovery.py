"""The window's side of persistence and recovery: the database opened with a way out,
replies written while they stream (:class:`app.store.stream.StreamJournal`), replies a
crash interrupted shown again with a way to continue them, and failed writes reported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.model.chat import ChatModel
from app.shell.context import ShellContext
from app.shell.startup.db_open import Ask, message_box_ask, open_store
from app.store.compare_runs import branch_key
from app.store.store import INTERRUPTED, Store
from app.store.stream import StreamJournal
from app.views.status import StatusWidgets

ask_override: Ask | None = None
"""Tests set this to answer the "cannot open the database" question without a dialog."""


def open_window_store(path: str | Path, parent) -> Store:
    """The store for a new window: opened (asking what to do if it cannot be), then the
    replies a crash interrupted recovered as branches (``store.recovered``)."""
    store = open_store(path, ask_override or message_box_ask(parent))
    store.recovered = store.writes.recover_interrupted()
    return store


class JournalRelay(QObject):
    """The journal's reports, from its writer thread to the GUI thread; it owns the journal
    and the last write's error (``save_error``, empty while saving works)."""

    failed = Signal(object)
    recovered = Signal()

    def __init__(self, status: StatusWidgets, parent: QObject) -> None:
        super().__init__(parent)
        self.status = status
        self.save_error = ""
        self.journal: StreamJournal | None = None
        self.failed.connect(self._on_failed)
        self.recovered.connect(self._on_recovered)

    @Slot(object)
    def _on_failed(self, exc: BaseException) -> None:
        self.status.show_message(
            f"Could not save to the database ({exc}): the reply is kept in memory and saving is retried."
        )
        self.save_error = str(exc)

    @Slot()
    def _on_recovered(self) -> None:
        self.status.show_message("Saving works again: everything kept in memory is saved.")
        self.save_error = ""


def attach_journal(store: Store, model: ChatModel, status: StatusWidgets, parent: QObject) -> JournalRelay:
    """The stream journal of ``store``, handed to ``model``; returns the relay that owns it
    (``relay.journal``) and reports its writes in ``status``."""
    relay = JournalRelay(status, parent)
    relay.journal = journal = StreamJournal(
        store.path,
        on_error=relay.failed.emit,
        on_recovered=relay.recovered.emit,
        sources=store.model_sources,
        precisions=store.model_precisions,
        backends=store.model_backends,
    )
    model.generation.journal = journal
    return relay


def announce_recovered(context: ShellContext, open_conversation: Callable[[int], None]) -> str:
    """After the start: open the conversation of a reply a crash interrupted and say so;
    returns what was said (empty: nothing to say)."""
    store, model = context.store, context.model
    recovered = getattr(store, "recovered", [])
    notes: list[str] = []
    if recovered:
        conversation = store.reads.conversation_of_branch(recovered[-1])
        if conversation is not None and (model.conversation is None or model.conversation.id != conversation):
            open_conversation(conversation)
        count = len(recovered)
        notes.append(
            f"{count} {'reply' if count == 1 else 'replies'} interrupted when Logitscope stopped "
            f"{'was' if count == 1 else 'were'} recovered: Chat → Continue the interrupted reply."
        )
    if store.moved_aside is not None or store.opened_instead:
        where = f" The old file is now {store.moved_aside}." if store.moved_aside else ""
        notes.append(f"Started with a new database at {store.path}.{where}")
    note = " ".join(notes)
    if notes:
        context.status.show_message(note, 30000)
    return note


def interrupted_message(model: ChatModel):
    """The last assistant message of the open conversation whose shown reply was interrupted."""
    for message in reversed(model.thread):
        if message.role == "assistant" and message.branch is not None:
            return message if message.branch.finish_reason == INTERRUPTED and message.branch.steps else None
    return None


def continue_interrupted(context: ShellContext) -> bool:
    """Continue the interrupted reply from its last saved token (the engine's continue
    path: the saved tokens as output, the last one forced), with its own settings."""
    model, status = context.model, context.status
    if context.in_use.info is None or model.busy():
        status.show_message("Wait for the model (or the reply being written) first.")
        return False
    message = interrupted_message(model)
    if message is None:
        status.show_message("No interrupted reply to continue in this conversation.")
        return False
    branch = message.branch
    last = len(branch.steps) - 1
    model.select((branch_key(branch.id), last))
    step = branch.steps[last]
    # The text too: a server's reply continues from text, and may have no token ids.
    return model.generation.pick_token(step.token_id, step.params, forced_text=step.text)
