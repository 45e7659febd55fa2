"""How a reply that ended becomes part of the stored conversation (no Qt): a single reply a
branch of its message, a compare run every column a branch and the run with its
divergence, a reply cancelled before its first new token nothing but a note. The branch's
row is written at once (its id names the stream from then on: ``Selection.rename``), its
steps once serialized off the GUI thread; the stream journal (``app.store.stream``) is told,
so its rows of the reply go. :class:`app.model.generation.Generation` calls these when the
worker reports a reply's end; a served reply of a conversation not open is saved on the
served requests' writer (its message is not in the thread shown, so only the store changes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.model.conversation_thread import ConversationThread
from app.model.entries import CANCELLED_EARLY
from app.model.selection import Selection
from app.model.served import ServedRequests
from app.model.streams import Reply, Streams
from app.store.compare_runs import CompareRun, branch_key
from app.store.serialize import steps_to_json
from engine.api.events import Finished, FinishReason, TokenStep


class ReplySaving:
    """Saving the replies that ended into ``opened``'s conversation: they leave ``streams``,
    their streams are renamed through ``selection``; ``errored(exc)``: steps that could not
    be serialized."""

    def __init__(
        self,
        opened: ConversationThread,
        streams: Streams,
        selection: Selection,
        served: ServedRequests,
        errored: Callable[[BaseException], None],
    ) -> None:
        self.opened, self.streams, self.selection, self.served, self.errored = (
            opened,
            streams,
            selection,
            served,
            errored,
        )

    def save_reply(self, journal: Any, reply: Reply, finished: Finished) -> None:
        """``reply`` as the newest branch of its message, made the active one."""
        opened = self.opened
        if reply.served_in is not None and not self.streams.shows(reply):  # a burst of them: off the GUI thread
            opened.unanswered.pop(reply.message_id, None)
            self.served.save_reply(reply, finished, journal)
            return
        branch = opened.store.writes.add_branch(
            reply.message_id,
            reply.steps,
            finished.text,
            finished.finish_reason,
            self.streams.model_name,
            reply.params,
            "[]",
        )
        if journal is not None:
            journal.saved(reply.id, branch.id)
        self._write_steps(branch.id, reply.steps)
        opened.unanswered.pop(reply.message_id, None)
        message = opened.message(reply.message_id)
        if message is not None:
            opened.add_branch(message, branch)
            message.active = len(message.branches) - 1
            if message is not opened.thread[-1]:
                opened.reload_after(message)
        self.selection.rename(reply.key, branch_key(branch.id))

    def save_run(self, journal: Any, run: CompareRun) -> None:
        """A compare run whose columns all ended: each column a branch, the run saved with its
        divergence (nothing but notes when every column was cancelled before its first token)."""
        opened, streams = self.opened, self.streams
        replies = [streams.replies.pop(c.stream[1]) for c in run.columns]
        streams.live_runs.pop(run.group, None)
        run.group = None
        if all(not r.new_steps and r.finished.finish_reason == FinishReason.CANCELLED for r in replies):
            for reply in replies:
                self.drop_reply(journal, reply)
            return
        columns = [
            (c, r.steps, r.finished.text, r.finished.finish_reason) for c, r in zip(run.columns, replies, strict=True)
        ]
        run.id, branches = opened.store.writes.add_compare_run(
            run.message_id, columns, streams.model_name, run.prefix_tokens, run.divergence, steps_later=True
        )
        opened.unanswered.pop(run.message_id, None)
        message = opened.message(run.message_id)
        for branch, reply in zip(branches, replies, strict=True):
            if journal is not None:
                journal.saved(reply.id, branch.id)
            opened.runs[branch.id] = run
            self._write_steps(branch.id, reply.steps)
            if message is not None:
                opened.add_branch(message, branch)
        if message is not None:
            message.active = len(message.branches) - len(branches)
            if message is not opened.thread[-1]:
                opened.reload_after(message)
        for column, reply, branch in zip(run.columns, replies, branches, strict=True):
            column.stream = branch_key(branch.id)
            self.selection.rename(reply.key, column.stream)

    def drop_reply(self, journal: Any, reply: Reply) -> None:
        """A reply cancelled before its first new token: nothing is saved, the chat says so."""
        self.opened.unanswered[reply.message_id] = CANCELLED_EARLY
        if journal is not None:
            journal.dropped(reply.id)

    def _write_steps(self, branch_id: int, steps: list[TokenStep]) -> None:
        """Serialize a saved reply's steps off the GUI thread, then write them."""
        steps = list(steps)
        store = self.opened.store

        def then(result: str | BaseException) -> None:
            if isinstance(result, BaseException):
                self.errored(result)
            else:
                store.writes.set_branch_steps(branch_id, result)

        self.opened.background(lambda: steps_to_json(steps, pause=lambda: time.sleep(0)), then)
