"""The token streams the chat shows (Qt-free): the replies being written (:class:`Reply`,
``("reply", id)``) beside the saved branches of the thread (``("branch", id)``), and the
queries that read a stream whichever it is (:class:`Streams`). When a reply is saved its
stream is renamed to the new branch and the selection moves with it."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.model.conversation_thread import ConversationThread
from app.model.model_in_use import ModelInUse
from app.model.reply_origin import ReplyOrigin
from app.store.compare_runs import CompareRun, StreamKey, reply_key
from app.store.store import Message
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams


@dataclass(eq=False)
class Reply:
    """A reply being written: the tokens kept from where it starts, then the new ones."""

    id: int
    """Stable, and the worker's tag for the request."""
    message_id: int
    params: SamplingParams
    steps: list[TokenStep] = field(default_factory=list)
    """Kept tokens first (``prefix_len`` of them), then each new token as it arrives."""
    prefix_len: int = 0
    run: CompareRun | None = None
    column: int = 0
    request_id: int | None = None
    finished: Finished | None = None
    served_in: int | None = None
    """A served request's reply (``app.model.served``): its conversation, which may not be
    the one open; None for the app's own replies, always the open conversation's."""

    @property
    def key(self) -> StreamKey:
        return reply_key(self.id)

    @property
    def new_steps(self) -> list[TokenStep]:
        return self.steps[self.prefix_len :]


class Streams:
    """The replies being written (``replies`` by tag, ``live_runs`` by group) and every
    stream's steps, message, run and origin, whether it is being written or saved in
    ``thread``."""

    def __init__(self, thread: ConversationThread, in_use: ModelInUse) -> None:
        self.thread, self.in_use = thread, in_use
        self.replies: dict[int, Reply] = {}
        self.live_runs: dict[int, CompareRun] = {}

    @property
    def model_name(self) -> str:
        """The loaded model's name, recorded with every reply ("?" before one has loaded)."""
        info = self.in_use.info
        return info.name if info is not None else "?"

    def shows(self, reply: Reply) -> bool:
        """Whether ``reply`` belongs to the open conversation: every reply of the app's own,
        a served one only while its conversation is open."""
        conversation = self.thread.conversation
        return reply.served_in is None or (conversation is not None and reply.served_in == conversation.id)

    def busy(self) -> bool:
        """A reply of the open conversation is being written (the app's own, or a served one)."""
        return any(self.shows(r) for r in self.replies.values())

    def steps_of(self, stream: StreamKey | None) -> list[TokenStep] | None:
        """The steps of a stream (a reply being written or a saved branch), or None."""
        if stream is None:
            return None
        kind, ident = stream
        if kind == "reply":
            reply = self.replies.get(ident)
            return reply.steps if reply is not None else None
        found = self.thread.branches.get(ident)
        return found[1].steps if found is not None else None

    def message_of(self, stream: StreamKey) -> Message | None:
        kind, ident = stream
        if kind == "reply":
            reply = self.replies.get(ident)
            return self.thread.message(reply.message_id) if reply is not None else None
        found = self.thread.branches.get(ident)
        return found[0] if found is not None else None

    def run_of(self, stream: StreamKey | None) -> CompareRun | None:
        """The compare run ``stream`` is a column of (live or saved), if any."""
        if stream is None:
            return None
        if stream[0] == "reply":
            reply = self.replies.get(stream[1])
            return reply.run if reply is not None else None
        return self.thread.runs.get(stream[1])

    def precision_of(self, stream: StreamKey | None) -> str | None:
        """What a reply was computed in: a saved branch's own record (None: not recorded), a
        reply being written the loaded model's (``Store.note_model``)."""
        if stream is None:
            return None
        if stream[0] == "reply":
            return self.thread.store.model_precisions.get(self.model_name)
        found = self.thread.branches.get(stream[1])
        return found[1].precision if found is not None else None

    def origin_of(self, stream: StreamKey | None) -> ReplyOrigin:
        """What wrote a reply (``app.model.reply_origin``): a saved branch's own record, a
        reply being written the loaded model's; every view labels the reply by it."""
        if stream is None:
            return ReplyOrigin()
        steps = self.steps_of(stream) or ()
        if stream[0] == "reply":
            store, name = self.thread.store, self.model_name
            return ReplyOrigin.of(
                name,
                store.model_sources.get(name),
                store.model_precisions.get(name),
                store.model_backends.get(name),
                steps,
            )
        found = self.thread.branches.get(stream[1])
        if found is None:
            return ReplyOrigin()
        branch = found[1]
        return ReplyOrigin.of(branch.model, branch.model_source, branch.precision, branch.backend, steps)
