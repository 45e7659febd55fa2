"""Requests from the app's own OpenAI-compatible server, in the model layer (no Qt).

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
from app.model.model_in_use import ModelInUse
from app.model.seeds import with_seed
from app.model.served_writer import (
    DELETE_BATCH,
    KEEP_DEFAULT,
    InlineWriter,
    ServedWriter,
    count_deletable,
    delete_request,
    delete_served,
    finish_request,
    prune_served,
    refuse_stored,
    save_branch,
    store_refusal,
    store_request,
)
from app.model.streams import Reply
from app.store.served_log import ServedRow
from app.store.store import Message, Store
from engine.api.errors import EngineError
from engine.api.events import Event, Finished, TokenStep
from engine.api.params import SamplingParams
from engine.serve.request_fields import ServedRequest
from engine.serve.seam import Refused

INSPECTED = SamplingParams().top_logprobs
"""Candidates a served reply is inspected at, at least (a client that asks no logprobs too)."""
COMPLETION_PROMPT = "Completion of: "
"""How a ``/v1/completions`` request's raw prompt reads as its conversation's user turn."""
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

    def __init__(
        self,
        store: Store,
        in_use: ModelInUse,
        replies: dict[int, Reply],
        new_id: Callable[[], int],
        open_conversation: Callable[[], int | None],
        status: Callable[[str], None],
        submit: Callable[[Any], None],
    ) -> None:
        """``replies``: the chat's replies being written (a served one joins them, by its tag);
        ``new_id``: a new tag; ``open_conversation``: the open conversation's id (None: none
        yet); ``status``: a word for the status bar; ``submit``: a job for the worker."""
        self.store, self.in_use, self.replies = store, in_use, replies
        self.new_id, self.open_conversation, self.status, self.submit = new_id, open_conversation, status, submit
        self.events = ServedEvents()
        self.rows: list[ServedRow] = store.served.recent()
        self.live: dict[int, ServedRow] = {}
        self.count = 0
        """Requests that arrived since the app started (the status bar's count)."""
        self.open: ServedRow | None = None
        """The open conversation's request, if it is a served one (:meth:`opened`)."""
        self._messages: tuple[dict[str, str], ...] = ()  # what its client sent, exactly
        self.writer: InlineWriter | ServedWriter = InlineWriter(store)
        """Where the requests are written (``use_writer``: the shell's, off the GUI thread)."""
        self.keep = KEEP_DEFAULT
        """The retention: the newest ``keep`` served requests stay (0: all)."""
        self._first_live_id = store.served.next_id()
        """Rows from here on are this run's: one not ended is being written, never pruned."""
        self._saving: dict[int, int] = {}
        """Conversations whose served reply is being saved on the writer's thread (how many)."""
        self.closed = False

    def settle(self, conversation_id: int) -> None:
        """``conversation_id`` is about to be read: a served reply of it still being saved is
        saved first (read before that, it would show its reply unanswered for good)."""
        if self._saving.get(conversation_id):
            self.writer.wait()

    def opened(self, conversation_id: int | None) -> None:
        """The chat opened ``conversation_id`` (None: a new chat): its request, read from the
        store (the list holds the latest only), with the messages its client sent."""
        served = self.store.served
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
        """Store ``request`` as a conversation (on the writer's thread) and start its reply
        once it is stored; or refuse it through ``started`` when no model that can serve is
        in use."""
        if started.cancelled():  # its client gave up while it crossed over
            return
        info = self.in_use.info
        why = "no model is loaded yet." if info is None else info.capabilities.reason("serve")
        if why:
            refuse(started, EngineError(f"serve: {why}"))
            return
        shown = conversation_of(request)
        self.writer.submit(
            lambda store: store_request(store, request, info.name, shown),
            lambda result: self._stored(request, sink, started, result),
        )

    def refused(self, refusal: Refused) -> None:
        """The server refused a request with a 400 before it became a conversation: it is
        listed too, with its error (written on the writer's thread)."""
        info = self.in_use.info
        model = info.name if info is not None else ""
        self.writer.submit(lambda store: store_refusal(store, refusal, model), self._refusal_stored)

    def _refusal_stored(self, result: ServedRow | Exception) -> None:
        if self.closed:
            return
        if isinstance(result, Exception):
            self.status(f"A refused request could not be listed: {result}")
            return
        self.rows.insert(0, result)
        self.count += 1
        self.events.added(result)
        self.prune()

    def _stored(
        self, request: ServedRequest, sink: Callable[[Event], None], started: Future, result: ServedRow | Exception
    ) -> None:
        """The writer stored ``request`` (``result``: its row), or could not (the client is told)."""
        if self.closed:
            return
        if isinstance(result, Exception):  # the store refused (a full disk, a locked file)
            refuse(started, result)
            self.status(f"A served request could not be stored: {result}")
            return
        row = result
        if started.done():  # its client gave up (or the server stopped) while it was written
            self.writer.submit(lambda store: delete_request(store, row.conversation_id))
            return
        reply = Reply(self.new_id(), row.message_id, inspected(request), served_in=row.conversation_id)
        self.replies[reply.id] = reply
        self.rows.insert(0, row)
        self.live[reply.id] = row
        self.count += 1
        self.events.added(row)
        self.submit(ServedJob(reply.id, replace(request, params=reply.params), sink, started))

    # The worker's reports ----------------------------------------------------------------

    def on_job_rejected(self, tag: int, exc: BaseException) -> None:
        """The engine refused it (the client was told): its conversation goes again."""
        row = self.live.pop(tag, None)
        if row is None:
            return
        self.forget(row.conversation_id)
        self.count -= 1
        # Listed still, as a refused request with the error its client got (its conversation goes).
        self.writer.submit(lambda store: refuse_stored(store, row, str(exc)), self._refusal_stored)

    def on_token(self, tag: int, step: TokenStep) -> None:
        row = self.live.get(tag)
        if row is not None:
            row.tokens += 1
            self.events.changed(row)

    def on_finished(self, tag: int, finished: Finished) -> None:
        row = self.live.pop(tag, None)
        if row is None:
            return
        row.finish_reason = reason = str(finished.finish_reason.value)
        tokens = row.tokens
        self.writer.submit(lambda store: finish_request(store, row.id, reason, tokens))
        self.events.changed(row)
        self.prune()

    def save_reply(self, reply: Reply, finished: Finished, journal: Any) -> None:
        """A served reply of a conversation not open, saved as its message's branch on the
        writer's thread (its steps serialized there); the stream journal's rows of it go once
        it is written (the journal's queue takes the word from any thread)."""
        info = self.in_use.info
        model = info.name if info is not None else "?"  # what the chat records with every reply
        steps, params, message_id = list(reply.steps), reply.params, reply.message_id

        def work(store: Any) -> int:
            branch_id = save_branch(store, message_id, steps, finished, model, params)
            if journal is not None:
                journal.saved(reply.id, branch_id)
            return branch_id

        conversation = reply.served_in
        if conversation is not None:
            self._saving[conversation] = self._saving.get(conversation, 0) + 1

        def then(result: object) -> None:
            if conversation is not None:
                left = self._saving.pop(conversation, 1) - 1
                if left:
                    self._saving[conversation] = left
            self._failed(result, "saved")

        self.writer.submit(work, then)

    def _failed(self, result: object, what: str) -> None:
        if isinstance(result, Exception) and not self.closed:
            self.status(f"A served reply could not be {what}: {result}")

    # Retention and deletion ----------------------------------------------------------------

    def protected(self) -> frozenset[int]:
        """Conversations neither the retention nor a deletion takes: the requests being
        written and the open conversation."""
        open_id = self.open_conversation()
        live = {r.conversation_id for r in self.live.values()}
        return frozenset(live | ({open_id} if open_id is not None else set()))

    def set_keep(self, keep: int) -> None:
        """Keep the newest ``keep`` served requests (0: all); older ones go now."""
        self.keep = max(0, int(keep))
        self.prune()

    def prune(self) -> None:
        """The retention, on the writer's thread: the rows that went leave the list."""
        keep, protected, first = self.keep, self.protected(), self._first_live_id
        if keep > 0:
            self.writer.submit(lambda store: prune_served(store, keep, protected, first), self._gone)

    def deletable(self) -> int:
        """How many served requests *Delete served requests…* would delete (read on this thread)."""
        return count_deletable(self.store, self.protected(), self._first_live_id)

    def delete_some(self, then: Callable[[int | Exception], None], limit: int = DELETE_BATCH) -> None:
        """One step of *Delete served requests…*: the oldest ``limit`` that may go; ``then``
        gets how many may still go (or the error)."""
        protected, first = self.protected(), self._first_live_id

        def done(result: tuple[list[int], int] | Exception) -> None:
            if isinstance(result, Exception):
                then(result)
                return
            self._gone(result[0])
            then(result[1])

        self.writer.submit(lambda store: delete_served(store, protected, first, limit), done)

    def _gone(self, result: list[int] | Exception) -> None:
        if self.closed:
            return
        if isinstance(result, Exception):
            self.status(f"Served requests could not be deleted: {result}")
            return
        gone = set(result)
        for row in [r for r in self.rows if r.id in gone]:
            self.rows.remove(row)
            self.events.removed(row.id)

    def use_writer(self, writer: InlineWriter | ServedWriter) -> None:
        """Write through ``writer`` from now on (the shell's thread of its own)."""
        self.writer = writer

    def close(self) -> None:
        """The app closes: the writes submitted are done, and nothing more is reported."""
        self.closed = True
        self.writer.close()


def inspected(request: ServedRequest) -> SamplingParams:
    """The settings a served request runs under in the app: the client's, with a concrete seed,
    inspected at least as deep as a reply of the app's own (``INSPECTED``): the Chain tab shows
    the whole chain whatever the client asked to see; its answer is cut to the client's own
    ``top_logprobs`` (``engine.serve.responses`` reads ``request.logprobs``, not these)."""
    params = with_seed(request.params)
    return params if params.top_logprobs >= INSPECTED else params.with_changes(top_logprobs=INSPECTED)


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
