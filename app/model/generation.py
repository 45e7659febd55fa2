"""Starting replies and compare runs, and what the engine's worker reports about them.

:class:`Generation` is held by :class:`app.model.chat.ChatModel` (``model.generation``) and
is given the chat's parts it works on: the conversation and its thread, the streams, the
selection, the served requests and the chat's events, with the three checks and the redraw
the chat owns (``params_ok``, ``context_for``, ``refresh``).

Every reply has an id that is also its tag for the worker; a compare run's replies share
one group id. A reply is saved as a branch when it finishes; a compare run is saved (every
column as a branch of the message, the run with its divergence) when its last column does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.model.chat_events import ChatEvents
from app.model.conversation_thread import ConversationThread
from app.model.entries import REFUSED
from app.model.jobs import ChatJob, ForcedToken, ForkJob
from app.model.reply_saving import ReplySaving
from app.model.scored import ScoreJob
from app.model.seeds import with_seed
from app.model.selection import Selection
from app.model.served import RAW_PROMPT, ServedRequests
from app.model.streams import Reply, Streams
from app.model.thinking import live_params_for
from app.model.timeline_series import variant_applied
from app.store.compare_runs import CompareColumn, CompareRun, DivergenceSeries, TokenRef, branch_key
from app.store.scored_labels import score_label
from app.store.store import Message
from engine.api.carry import carry_from_steps
from engine.api.events import Divergence, Finished, FinishReason, TokenStep
from engine.api.params import SamplingParams

MIN_VARIANTS, MAX_VARIANTS = 2, 4
Variant = tuple[str, SamplingParams]
"""A compare column's settings: (label, parameters)."""


class ReplyFailed(RuntimeError):
    """A reply ended with an error in the engine (its tokens so far are kept)."""


class Generation:
    """The chat's commands that start or change replies, and the worker's reports on them."""

    def __init__(
        self,
        opened: ConversationThread,
        streams: Streams,
        selection: Selection,
        served: ServedRequests,
        events: ChatEvents,
        params_ok: Callable[[Sequence[Variant]], bool],
        context_for: Callable[[Message], tuple[dict[str, str], ...]],
        refresh: Callable[..., None],
    ) -> None:
        """``params_ok(variants)``: whether the model in use takes those settings (else the
        chat says why); ``context_for(message)``: the messages a reply to ``message`` is
        written after; ``refresh(followed_gone=False)``: the chat's entries rebuilt."""
        self.opened, self.streams, self.selection, self.served, self.events = opened, streams, selection, served, events
        self.params_ok, self.context_for, self.refresh = params_ok, context_for, refresh
        self.saving = ReplySaving(opened, streams, selection, served, events.errored)
        self.journal = None
        """An :class:`app.store.stream.StreamJournal` writing replies while they stream, or None."""
        self.enable_thinking: bool | None = None
        """The chat template's ``enable_thinking`` for the next prompts; None: the template's
        default (a model whose template has no such switch)."""
        self._next_id = 1

    # Commands ---------------------------------------------------------------------------------

    def send(self, text: str, params: SamplingParams) -> bool:
        """Add a turn and start its reply; False (and a status message) when it cannot."""
        message = self.add_turn(text, [("", params)])
        if message is None:
            return False
        self._start_reply(message, params)
        return True

    def send_compare(self, text: str, variants: Sequence[Variant]) -> bool:
        """Add a turn and answer it with every variant side by side (one prefill)."""
        if not self._check_variants(variants):
            return False
        message = self.add_turn(text, variants)
        if message is None:
            return False
        self._start_run(message, variants)
        return True

    def regenerate(self, params: SamplingParams, variants: Sequence[Variant] | None = None) -> bool:
        message = self.opened.last_assistant()
        if message is None or self.streams.busy() or (variants is not None and not self._check_variants(variants)):
            return False
        if self._raw_prompt():
            return False
        if not self.params_ok(variants if variants is not None else [("", params)]):
            return False
        if variants is None:
            self._start_reply(message, params)
        else:
            self._start_run(message, variants)
        return True

    def pick_token(self, token_id: int | None, params: SamplingParams, forced_text: str | None = None) -> bool:
        """Continue the selected token's reply from that token, with ``token_id`` instead.
        ``forced_text``: the picked token's text; a server continues from it, and it is what
        names a token the server sent without its id (``token_id`` None)."""
        message = self._message_for_continuation(self.selection.ref)
        if message is None or not self.params_ok([("", params)]):
            return False
        stream, index = self.selection.ref
        steps = self.streams.steps_of(stream)
        prefix = steps[:index]
        top = steps[index].top if index < len(steps) else ()
        picked = forced_text
        if picked is None and token_id is not None:
            picked = next((c.text for c in top if c.token_id == token_id), None)
        if token_id is None and picked is None:
            self.events.status("This token has neither an id nor a text to continue from.")
            return False
        for reply in list(self.streams.replies.values()):
            if reply.message_id == message.id:
                self.events.cancel_requested(reply.id)
        self._start_reply(message, params, prefix, forced=ForcedToken(token_id, picked))
        self.events.status("Continuing from the picked token; the earlier reply is kept as a branch.")
        return True

    def compare_from(self, ref: TokenRef, variants: Sequence[Variant]) -> bool:
        """ "Compare from here": each variant redraws token ``ref`` and continues from it."""
        if self.streams.busy():
            self.events.status("Wait for the replies being written, or stop them (Esc), to compare from a token.")
            return False
        message = self._message_for_continuation(ref)
        if message is None or not self._check_variants(variants) or not self.params_ok(variants):
            return False
        self._start_run(message, variants, self.streams.steps_of(ref[0])[: ref[1]])
        return True

    def score(
        self, text: str, params: SamplingParams, prompt: str | None, new_chat: Callable[[], None]
    ) -> Reply | None:
        """Score ``text`` as the first turn's reply of a new conversation (``new_chat`` opens
        it); None when it cannot."""
        text = text.strip("\n")
        if not text.strip():
            self.events.status("There is no text to score.")
            return None
        if self.streams.busy():
            self.events.status("A reply is still being written: stop it first (Esc).")
            return None
        new_chat()
        label = prompt if prompt else score_label(text)
        message = self.add_turn(label, [("", params)])
        if message is None:
            return None
        reply = Reply(self.new_id(), message.id, params)
        self.streams.replies[reply.id] = reply
        self.selection.follow(reply.key)
        self.refresh()
        self.events.busy_changed(True)
        messages = None
        if prompt:
            system = self.opened.system_prompt.strip()
            messages = tuple(
                ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            )
        self.events.job_submitted(ScoreJob(reply.id, text, params, messages))
        self.events.status("Scoring the text…")
        return reply

    def stop(self, served: bool = True) -> None:
        """Stop the open conversation's replies being written; ``served``: a served request's
        too (its client gets the end of its reply)."""
        for tag, reply in list(self.streams.replies.items()):
            if self.streams.shows(reply) and (served or reply.served_in is None):
                self.events.cancel_requested(tag)

    def set_enable_thinking(self, enabled: bool | None) -> None:
        """The panel's Thinking toggle: sent with every reply started from now on."""
        self.enable_thinking = enabled

    def update_live_params(self, params: SamplingParams, column: int = 0) -> None:
        """New parameters, from their next token, for column ``column`` of the compare runs
        being written; the main settings (column 0) also go to the single replies."""
        targets = [
            r
            for r in self.streams.replies.values()
            if r.finished is None
            and r.served_in is None  # a served request keeps the settings its client sent
            and (r.column == column if r.run is not None else column == 0)
        ]
        for reply in targets:  # an answer already written takes the answer's settings
            self.events.params_requested(reply.id, live_params_for(reply.steps, params))
        if targets:
            self.events.status("Parameters changed: they apply from the next token.")

    # Worker events ----------------------------------------------------------------------------

    def on_job_started(self, tag: int, request_id: int, prompt_tokens: int) -> None:
        reply = self.streams.replies.get(tag)
        if reply is not None:
            reply.request_id = request_id
            if self.streams.shows(reply) and (reply.run is None or reply.column == 0):
                # A server does not say how it tokenized the prompt (0): not reported, not 0. The
                # local engine's 0 is a scored text's, whose prompt is read with it: no words.
                if prompt_tokens > 0:
                    self.events.status(f"Prompt: {prompt_tokens} tokens")
                elif self.streams.origin_of(reply.key).remote:
                    self.events.status("Prompt: tokens not reported by the server")

    def on_job_rejected(self, tag: int, exc: BaseException) -> None:
        reply = self.streams.replies.pop(tag, None)
        if reply is None:
            return
        if reply.served_in is not None:  # its client was told, and its conversation goes
            self.events.status(f"A served request was refused: {exc}")
            return
        if reply.run is not None:  # a fork is refused as a whole
            for column in reply.run.columns:
                self.streams.replies.pop(column.stream[1], None)
            self.streams.live_runs.pop(reply.run.group, None)
        self.opened.unanswered[reply.message_id] = REFUSED
        self._refresh_after_end()
        self.events.busy_changed(self.streams.busy())
        self.events.errored(exc)

    def on_token(self, tag: int, step: TokenStep) -> None:
        reply = self.streams.replies.get(tag)
        if reply is None:
            return
        reply.steps.append(step)
        if self.journal is not None:
            self.journal.token(reply.id, reply.message_id, self.streams.model_name, reply.params, reply.steps)
        if len(reply.steps) > reply.prefix_len + 1 and step.params != (before := reply.steps[-2].params):
            settings = "The answer's settings" if variant_applied(before, step.params) else "New parameters"
            self.events.status(f"{settings} in force from token {step.index}.")
        if not self.streams.shows(reply):  # a served reply in a conversation not open
            return
        self.events.tokens_added(reply.key)
        if self.selection.follow_latest and self.selection.followed == reply.key:
            self.selection.set((reply.key, len(reply.steps) - 1))

    def on_divergence(self, group: int, event: Divergence) -> None:
        """``event.pairs`` name the worker's tags (the replies), not engine request ids."""
        run = self.streams.live_runs.get(group)
        if run is None:
            return
        columns = {column.stream[1]: i for i, column in enumerate(run.columns)}
        pairs = tuple((columns[a], columns[b]) for a, b in event.pairs)
        run.divergence.add(event.index, pairs, event.js, event.first_difference)
        self.events.divergence_added(run)

    def on_finished(self, tag: int, finished: Finished) -> None:
        reply = self.streams.replies.get(tag)
        if reply is None:
            return
        reply.finished = finished
        shown = self.streams.shows(reply)  # a served one not open: its client and the Served list say how it ended
        if shown:
            self.events.reply_finished(finished)
        if finished.finish_reason == FinishReason.ERROR and shown:
            kept = f" The {len(reply.steps)} tokens before it are kept." if reply.steps else ""
            self.events.status(f"The reply stopped: {finished.error}")
            self.events.errored(ReplyFailed(f"The reply stopped because of an error: {finished.error}.{kept}"))
        if reply.run is None:
            del self.streams.replies[tag]
            if reply.new_steps or finished.finish_reason != FinishReason.CANCELLED:
                self.saving.save_reply(self.journal, reply, finished)
            else:
                self.saving.drop_reply(self.journal, reply)
        elif all(self.streams.replies[c.stream[1]].finished is not None for c in reply.run.columns):
            self.saving.save_run(self.journal, reply.run)
        if shown:
            self._refresh_after_end()
            self.events.busy_changed(self.streams.busy())

    def _refresh_after_end(self) -> None:
        """Redraw after a reply ended; one followed that left nothing (no token, no branch)
        leaves nothing selected: the inspector must not go on showing an older reply's token."""
        followed = self.selection.followed
        # Dropped (cancelled in its prefill, refused), or saved without a token (failed before
        # the first: a stopped server): either way there is no token of it to select.
        running = followed is not None and followed[0] == "reply" and followed[1] in self.streams.replies
        gone = followed is not None and not running and not self.streams.steps_of(followed)
        self.refresh(followed_gone=gone)
        if gone:
            self.selection.followed = None  # from now on, the latest token is followed again

    # Internals ----------------------------------------------------------------------------------

    def _check_variants(self, variants: Sequence[Variant]) -> bool:
        if MIN_VARIANTS <= len(variants) <= MAX_VARIANTS:
            return True
        self.events.status(f"Compare needs {MIN_VARIANTS} to {MAX_VARIANTS} settings, got {len(variants)}.")
        return False

    def _settle_last_run(self) -> None:
        """Before a new turn: an undecided compare run at the end keeps its active column."""
        opened = self.opened
        last = opened.last_assistant()
        run = opened.runs.get(last.branch.id) if last is not None and last.branch else None
        if run is not None and run.kept is None and run.id is not None and last is opened.thread[-1]:
            column = run.column_of(branch_key(last.branch.id)) or 0
            opened.store.writes.set_compare_kept(run.id, column)
            run.kept = column
            self.events.status(f"Kept {run.label(column)}; the other columns stay as branches.")

    def new_id(self) -> int:
        """A new tag: a reply's, a compare run's group, a scored text's or a replay's."""
        self._next_id += 1
        return self._next_id - 1

    def add_turn(self, text: str, variants: Sequence[Variant]) -> Message | None:
        """The new user message's reply, or None when nothing may be added (no text, a reply
        still being written, settings the model would refuse)."""
        text = text.strip()
        if not text:
            return None
        if self.streams.busy():
            self.events.status("A reply is still being written: stop it first (Esc).")
            return None
        if not self.params_ok(variants) or self._raw_prompt():
            return None
        self._settle_last_run()
        if self.opened.start_conversation(text):
            self.events.conversation_changed(self.opened.conversation)
        return self.opened.add_turn(text)

    def _thinking(self) -> bool | None:
        """The chat template's ``enable_thinking`` for a prompt of the open conversation: a
        served one's is the template's default, as its reply was written (a client does not
        send the app's Thinking toggle)."""
        return None if self.served.open is not None else self.enable_thinking

    def _raw_prompt(self) -> bool:
        """A served completion's conversation is open (and the status bar says why nothing
        continues it): its prompt was raw text, which a chat turn does not stand for."""
        if self.served.raw_prompt():
            self.events.status(RAW_PROMPT)
            return True
        return False

    def _message_for_continuation(self, ref: TokenRef | None) -> Message | None:
        message = self.streams.message_of(ref[0]) if ref is not None else None
        if message is None or message.role != "assistant" or self._raw_prompt():
            return None
        if any(r.run is not None and r.message_id == message.id for r in self.streams.replies.values()):
            self.events.status("This message is being compared: wait for the columns to finish.")
            return None
        return message

    def _start_reply(
        self,
        message: Message,
        params: SamplingParams,
        prefix=(),
        forced: ForcedToken | None = None,
    ) -> Reply:
        """A new reply to ``message``; with ``forced``, a branch: ``prefix`` (the reply's steps
        before it) then that token."""
        params = with_seed(params)  # "random each reply": drawn now, so the reply can be written again
        reply = Reply(self.new_id(), message.id, params, list(prefix), len(prefix))
        self.streams.replies[reply.id] = reply
        output = tuple(s.token_id for s in prefix)  # None where a server sent no id: text below
        self.selection.follow(reply.key)
        self.refresh()
        self.events.busy_changed(True)
        text = "".join(s.text for s in prefix)
        carry = carry_from_steps(prefix) or None  # mirostat's μ as the reply left it
        job = ChatJob(reply.id, self.context_for(message), params, output, forced, text, carry, self._thinking())
        self.events.job_submitted(job)
        return reply

    def _start_run(self, message: Message, variants: Sequence[Variant], prefix=()) -> CompareRun:
        run = CompareRun(message.id, [], len(prefix), group=self.new_id())
        for column, (label, params) in enumerate(variants):
            params = with_seed(params)  # each column its own, unless the settings name one
            reply = Reply(self.new_id(), message.id, params, list(prefix), len(prefix), run=run, column=column)
            self.streams.replies[reply.id] = reply
            run.columns.append(CompareColumn(label, params, reply.key))
        run.divergence = DivergenceSeries(len(run.columns))
        self.streams.live_runs[run.group] = run
        self.selection.follow(run.columns[0].stream)
        self.refresh()
        self.events.busy_changed(True)
        tags = tuple(c.stream[1] for c in run.columns)
        output = tuple(s.token_id for s in prefix)
        params = tuple(c.params for c in run.columns)
        text = "".join(s.text for s in prefix)
        carry = carry_from_steps(prefix) or None
        self.events.job_submitted(
            ForkJob(run.group, tags, self.context_for(message), params, output, text, carry, self._thinking())
        )
        return run
