"""Requests from the app's own OpenAI-compatible server, in the model layer (issue 38, no Qt).

A request that arrives (``ServedRequests.arrive``, on the GUI thread) becomes a conversation
in the store, shown as the client sent it: its leading system messages are the system
prompt, each user turn a user message, each assistant turn the client sent a branch of text
(no steps: the client wrote it, the model did not), and the reply an assistant message
answered by a :class:`app.model.streams.Reply` marked with its conversation (``served_in``).
The store's thread cannot hold every list of messages a client may send (a greeting before
the first user turn, a system message between turns), so the messages themselves are kept
with the request, and what the model is sent again for the served reply and every turn
after it (a branch, a replay, an analysis, the person's next message) starts from them
(:meth:`ServedRequests.context`), never from the thread as shown. From there it is any
reply: the worker runs it beside the app's own (a :class:`ServedJob`, the same scheduler,
continuous batching), the stream journal writes it while it streams, it is saved as a branch
when it ends, and opened it streams in the chat like a local reply, every token
inspectable, branchable and replayable. What the conversation cannot say — who sent it, to
which endpoint, under which model, the settings as the client sent them, how it ended — is
the store's ``served`` row (:mod:`app.store.served_log`), which the Served list shows.

The engine checks the request when it starts it; a refusal goes back to the client (a 400)
and takes the conversation made for it out of the store again. The worker answers the client
with the reply's tag as the request's id, which no model load reuses, so a late cancel from
a client that went away can never reach another request.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, replace
from typing import Any

from app.model.entries import context_before
from app.model.events import EventEmitter, EventGroup
from app.model.seeds import with_seed
from app.model.streams import Reply
from app.store.served_log import ServedRow
from app.store.store import Message
from engine.api.errors import EngineError
from engine.api.events import Event, Finished, TokenStep
from engine.api.params import SamplingParams
from engine.serve.request_fields import ServedRequest

COMPLETION_PROMPT = "Completion of: "
"""How a ``/v1/completions`` request's raw prompt reads as its conversation's user turn."""
CLIENT = "client"
"""The model and backend recorded for an assistant turn the client sent (its text, no steps)."""
RAW_PROMPT = (
    "This reply continues a raw prompt (/v1/completions), which a chat turn cannot stand for: "
    "it can be inspected, not continued, replayed or analysed again."
)


@dataclass(frozen=True)
class ServedJob:
    """For the worker: start ``request`` under ``tag`` (the reply's), send each of its events
    to ``sink`` as well as to the GUI, and resolve ``started`` with ``tag`` (the id its client
    knows it by), or with the engine's refusal."""

    tag: int
    request: ServedRequest
    sink: Callable[[Event], None]
    started: Future


class ServedEvents(EventGroup):
    added: EventEmitter[[ServedRow]]
    """A request arrived and was stored (the newest row)."""
    changed: EventEmitter[[ServedRow]]
    """A row's token count or end changed."""
    removed: EventEmitter[[int]]
    """A row went (its request was refused, its conversation deleted; the row's id)."""


class ServedRequests:
    """The Served list's state: the rows saved (newest first) and the requests being written
    (by their reply's tag). Held by :class:`app.model.chat.ChatModel` as ``served``."""

    def __init__(self, chat: Any) -> None:
        self.chat = chat
        self.events = ServedEvents()
        self.rows: list[ServedRow] = chat.store.served.recent()
        self.live: dict[int, ServedRow] = {}
        self.count = 0
        """Requests that arrived since the app started (the status bar's count)."""
        self.open: ServedRow | None = None
        """The open conversation's request, if it is a served one (:meth:`opened`)."""
        self._messages: tuple[dict[str, str], ...] = ()  # what its client sent, exactly

    def opened(self, conversation_id: int | None) -> None:
        """The chat opened ``conversation_id`` (None: a new chat): its request, read from the
        store (the list holds the latest only), with the messages its client sent."""
        served = self.chat.store.served
        self.open = served.of_conversation(conversation_id) if conversation_id is not None else None
        self._messages = served.messages_of(self.open.id) if self.open is not None else ()

    def raw_prompt(self) -> bool:
        """Whether the open conversation is a served ``/v1/completions`` request's."""
        return self.open is not None and self.open.endpoint == "completion"

    def context(self, thread: Sequence[Message], index: int) -> tuple[dict[str, str], ...] | None:
        """What the model is sent for ``thread[index]`` of the open conversation when that is
        the served reply or a turn after it: the messages the client sent, then the turns
        since (the reply's own text, the person's later turns); None otherwise."""
        if self.open is None or not self._messages:
            return None
        at = next((i for i, m in enumerate(thread) if m.id == self.open.message_id), None)
        if at is None or index < at:
            return None
        return self._messages + context_before(thread[at:], index - at, "")

    def forget(self, conversation_id: int) -> None:
        """The conversation was deleted: its row goes from the list (the store's went with it)."""
        for row in [r for r in self.rows if r.conversation_id == conversation_id]:
            self.rows.remove(row)
            self.events.removed(row.id)
        self.live = {tag: r for tag, r in self.live.items() if r.conversation_id != conversation_id}

    # A request arrives -------------------------------------------------------------------

    def arrive(self, request: ServedRequest, sink: Callable[[Event], None], started: Future) -> None:
        """Store ``request`` as a conversation and start its reply (or refuse it through
        ``started`` when no model that can serve is in use)."""
        if started.cancelled():  # its client gave up while it crossed over
            return
        info = self.chat.in_use.info
        why = "no model is loaded yet." if info is None else info.capabilities.reason("serve")
        if why:
            refuse(started, EngineError(f"serve: {why}"))
            return
        store = self.chat.store
        system, turns = conversation_of(request)
        asked = next((text.strip() for role, text in reversed(turns) if role == "user" and text.strip()), "")
        title = asked.splitlines()[0][:60] if asked else "Served request"
        conversation = None
        try:
            conversation = store.writes.new_conversation(system, title)
            message = self._write_turns(conversation.id, turns)
            row = store.served.add(
                conversation.id,
                message.id,
                request.client,
                "chat" if request.chat else "completion",
                info.name,
                request.sent,
                request.messages,
            )
        except Exception as exc:  # the store refused (a full disk, a locked file): the client is told
            if conversation is not None:
                with contextlib.suppress(Exception):
                    store.writes.delete_conversation(conversation.id)
            refuse(started, exc)
            self.chat.events.status(f"A served request could not be stored: {exc}")
            return
        reply = Reply(self.chat.generation.new_id(), message.id, with_seed(request.params), served_in=conversation.id)
        self.chat.replies[reply.id] = reply
        self.rows.insert(0, row)
        self.live[reply.id] = row
        self.count += 1
        self.events.added(row)
        self.chat.events.job_submitted(ServedJob(reply.id, replace(request, params=reply.params), sink, started))

    def _write_turns(self, conversation_id: int, turns: Sequence[tuple[str, str]]) -> Message:
        """The client's turns as messages (its assistant turns branches of their text); the
        reply's message last."""
        writes = self.chat.store.writes
        after_branch, user = None, None
        for role, content in turns:
            if role == "user":
                user = writes.add_user_message(conversation_id, content, after_branch)
                continue
            said = writes.add_assistant_message(conversation_id, user.id)
            branch = writes.add_branch(said.id, [], content, None, CLIENT, SamplingParams(), "[]", backend=CLIENT)
            writes.set_active_branch(said.id, branch.id)
            after_branch = branch.id
        return writes.add_assistant_message(conversation_id, user.id)

    # The worker's reports ----------------------------------------------------------------

    def on_job_rejected(self, tag: int, exc: BaseException) -> None:
        """The engine refused it (the client was told): its conversation goes again."""
        row = self.live.pop(tag, None)
        if row is None:
            return
        self.chat.store.writes.delete_conversation(row.conversation_id)
        self.count -= 1
        self.forget(row.conversation_id)

    def on_token(self, tag: int, step: TokenStep) -> None:
        row = self.live.get(tag)
        if row is not None:
            row.tokens += 1
            self.events.changed(row)

    def on_finished(self, tag: int, finished: Finished) -> None:
        row = self.live.pop(tag, None)
        if row is None:
            return
        row.finish_reason = str(finished.finish_reason.value)
        self.chat.store.served.finish(row.id, row.finish_reason, row.tokens)
        self.events.changed(row)


def refuse(started: Future, exc: BaseException) -> None:
    """Tell the client its request was refused, unless it gave up on it already."""
    with contextlib.suppress(InvalidStateError):
        started.set_exception(exc)


def conversation_of(request: ServedRequest) -> tuple[str, list[tuple[str, str]]]:
    """A request as it is shown, (system prompt, turns): the leading system (and developer)
    messages are the system prompt; the rest alternate user and assistant (the store keeps a
    thread of alternating turns): a run of one role is one turn, a later system message is
    part of the user turn it falls in (marked ``System:``), an empty user turn stands before
    an assistant turn that opens the conversation and after one that ends it. A
    completion's prompt is one user turn. What the model is sent again is the messages
    themselves (:meth:`ServedRequests.context`), not this."""
    if not request.chat:
        return "", [("user", COMPLETION_PROMPT + request.prompt)]
    messages = list(request.messages)
    system = []
    while messages and messages[0]["role"] in ("system", "developer"):
        system.append(messages.pop(0)["content"])
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = "assistant" if message["role"] == "assistant" else "user"
        content = message["content"] if message["role"] in ("user", "assistant") else f"System: {message['content']}"
        if not turns and role == "assistant":
            turns.append(("user", ""))
        if turns and turns[-1][0] == role:
            turns[-1] = (role, turns[-1][1] + "\n\n" + content)
        else:
            turns.append((role, content))
    if not turns or turns[-1][0] == "assistant":
        turns.append(("user", ""))
    return "\n\n".join(system), turns


def settings_text(sent: Mapping[str, Any], limit: int = 0) -> str:
    """The settings as the client sent them, in one line (``limit``: cut to that many
    characters, 0: whole)."""
    text = ", ".join(f"{k}={json.dumps(v)}" for k, v in sent.items()) or "the server's defaults"
    return text if not limit or len(text) <= limit else text[: limit - 1] + "…"
