"""What :class:`app.model.chat.ChatModel` announces, declared: views connect to these, the
window connects the requests (``job_submitted``, ``cancel_requested``, ``params_requested``)
to the engine's worker."""

from __future__ import annotations

from app.model.events import EventEmitter, EventGroup
from app.model.jobs import ChatJob, ForkJob
from app.store.compare_runs import CompareRun, StreamKey, TokenRef
from app.store.store import Conversation
from engine.api.events import Finished
from engine.api.params import SamplingParams


class ChatEvents(EventGroup):
    conversation_changed: EventEmitter[[Conversation | None]]
    entries_changed: EventEmitter[[]]
    """``entries`` was rebuilt (messages, branches, headers)."""
    tokens_added: EventEmitter[[StreamKey]]
    """New steps at the end of a live stream."""
    stream_renamed: EventEmitter[[StreamKey, StreamKey]]
    """(old, new): a reply was saved as a branch."""
    selection_changed: EventEmitter[[TokenRef | None]]
    divergence_added: EventEmitter[[CompareRun]]
    busy_changed: EventEmitter[[bool]]
    job_submitted: EventEmitter[[ChatJob | ForkJob]]
    cancel_requested: EventEmitter[[int]]
    """The reply's tag."""
    params_requested: EventEmitter[[int, SamplingParams]]
    """(tag, parameters): new parameters for a reply being written."""
    reply_finished: EventEmitter[[Finished]]
    status: EventEmitter[[str]]
    errored: EventEmitter[[BaseException]]
