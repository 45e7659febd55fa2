"""How a reply that ended becomes part of the stored conversation (no Qt): a single reply a
branch of its message, a compare run every column a branch and the run with its
divergence, a reply cancelled before its first new token nothing but a note. The branch's
row is written at once (its id names the stream from then on: ``rename_stream``), its steps
once serialized off the GUI thread; the stream journal (``app.store.stream``) is told, so
its rows of the reply go. :class:`app.model.generation.Generation` calls these when the
worker reports a reply's end; a served reply of a conversation not open is saved the same
way (its message is not in the thread shown, so only the store changes).
"""

from __future__ import annotations

import time
from typing import Any

from app.model.chat_state import ChatState
from app.model.entries import CANCELLED_EARLY
from app.model.streams import Reply
from app.store.compare_runs import CompareRun, branch_key
from app.store.serialize import steps_to_json
from engine.api.events import Finished, FinishReason, TokenStep


def save_reply(chat: ChatState, journal: Any, reply: Reply, finished: Finished) -> None:
    """``reply`` as the newest branch of its message, made the active one."""
    if reply.served_in is not None and not chat.shows(reply):  # a burst of them: off the GUI thread
        chat.unanswered.pop(reply.message_id, None)
        chat.served.save_reply(reply, finished, journal)
        return
    branch = chat.store.writes.add_branch(
        reply.message_id,
        reply.steps,
        finished.text,
        finished.finish_reason,
        chat.model_name,
        reply.params,
        "[]",
    )
    if journal is not None:
        journal.saved(reply.id, branch.id)
    _write_steps(chat, branch.id, reply.steps)
    chat.unanswered.pop(reply.message_id, None)
    message = chat.message(reply.message_id)
    if message is not None:
        message.branches.append(branch)
        message.active = len(message.branches) - 1
        chat.branches[branch.id] = (message, branch)
        if message is not chat.thread[-1]:
            chat.reload_after(message)
    chat.rename_stream(reply.key, branch_key(branch.id))


def save_run(chat: ChatState, journal: Any, run: CompareRun) -> None:
    """A compare run whose columns all ended: each column a branch, the run saved with its
    divergence (nothing but notes when every column was cancelled before its first token)."""
    replies = [chat.replies.pop(c.stream[1]) for c in run.columns]
    chat.live_runs.pop(run.group, None)
    run.group = None
    if all(not r.new_steps and r.finished.finish_reason == FinishReason.CANCELLED for r in replies):
        for reply in replies:
            drop_reply(chat, journal, reply)
        return
    columns = [
        (c, r.steps, r.finished.text, r.finished.finish_reason) for c, r in zip(run.columns, replies, strict=True)
    ]
    run.id, branches = chat.store.writes.add_compare_run(
        run.message_id, columns, chat.model_name, run.prefix_tokens, run.divergence, steps_later=True
    )
    chat.unanswered.pop(run.message_id, None)
    message = chat.message(run.message_id)
    for branch, reply in zip(branches, replies, strict=True):
        if journal is not None:
            journal.saved(reply.id, branch.id)
        chat.runs[branch.id] = run
        _write_steps(chat, branch.id, reply.steps)
        if message is not None:
            message.branches.append(branch)
            chat.branches[branch.id] = (message, branch)
    if message is not None:
        message.active = len(message.branches) - len(branches)
        if message is not chat.thread[-1]:
            chat.reload_after(message)
    for column, reply, branch in zip(run.columns, replies, branches, strict=True):
        column.stream = branch_key(branch.id)
        chat.rename_stream(reply.key, column.stream)


def drop_reply(chat: ChatState, journal: Any, reply: Reply) -> None:
    """A reply cancelled before its first new token: nothing is saved, the chat says so."""
    chat.unanswered[reply.message_id] = CANCELLED_EARLY
    if journal is not None:
        journal.dropped(reply.id)


def _write_steps(chat: ChatState, branch_id: int, steps: list[TokenStep]) -> None:
    """Serialize a saved reply's steps off the GUI thread, then write them."""
    steps = list(steps)

    def then(result: str | BaseException) -> None:
        if isinstance(result, BaseException):
            chat.events.errored(result)
        else:
            chat.store.writes.set_branch_steps(branch_id, result)

    chat.background(lambda: steps_to_json(steps, pause=lambda: time.sleep(0)), then)
