"""Starting replies and compare runs, and what the engine's worker reports about them.

Part of :class:`app.model.chat.ChatModel` (kept apart to keep each module one concept).
Every reply has an id that is also its tag for the worker; a compare run's replies share
one group id. A reply is saved as a branch when it finishes; a compare run is saved (every
column as a branch of the message, the run with its divergence) when its last column does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.model.entries import CANCELLED_EARLY, REFUSED
from app.model.jobs import ChatJob, ForcedToken, ForkJob
from app.model.seeds import with_seed
from app.model.streams import CompareColumn, CompareRun, DivergenceSeries, Reply, TokenRef, branch_key
from app.model.thinking import live_params_for
from app.model.timeline_series import variant_applied
from app.store.serialize import steps_to_json
from app.store.store import Message
from engine.api.carry import carry_from_steps
from engine.api.events import Divergence, Finished, FinishReason, TokenStep
from engine.api.params import SamplingParams

if TYPE_CHECKING:
    from app.model.chat import ChatModel

MIN_VARIANTS, MAX_VARIANTS = 2, 4
Variant = tuple[str, SamplingParams]
"""A compare column's settings: (label, parameters)."""


class ReplyFailed(RuntimeError):
    """A reply ended with an error in the engine (its tokens so far are kept)."""


class GenerationMixin:
    journal = None
    """An :class:`app.store.stream.StreamJournal` writing replies while they stream, or None."""
    enable_thinking: bool | None = None
    """The chat template's ``enable_thinking`` for the next prompts; None: the template's
    default (a model whose template has no such switch)."""

    # Commands ---------------------------------------------------------------------------------

    def send(self: ChatModel, text: str, params: SamplingParams) -> bool:
        """Add a turn and start its reply; False (and a status message) when it cannot."""
        message = self._add_turn(text, [("", params)])
        if message is None:
            return False
        self._start_reply(message, params)
        return True

    def send_compare(self: ChatModel, text: str, variants: Sequence[Variant]) -> bool:
        """Add a turn and answer it with every variant side by side (one prefill)."""
        if not self._check_variants(variants):
            return False
        message = self._add_turn(text, variants)
        if message is None:
            return False
        self._start_run(message, variants)
        return True

    def regenerate(self: ChatModel, params: SamplingParams, variants: Sequence[Variant] | None = None) -> bool:
        message = self.last_assistant()
        if message is None or self.busy() or (variants is not None and not self._check_variants(variants)):
            return False
        if not self.params_ok(variants if variants is not None else [("", params)]):
            return False
        if variants is None:
            self._start_reply(message, params)
        else:
            self._start_run(message, variants)
        return True

    def pick_token(
        self: ChatModel, token_id: int | None, params: SamplingParams, forced_text: str | None = None
    ) -> bool:
        """Continue the selected token's reply from that token, with ``token_id`` instead.
        ``forced_text``: the picked token's text; a server continues from it, and it is what
        names a token the server sent without its id (``token_id`` None)."""
        message = self._message_for_continuation(self.selection)
        if message is None or not self.params_ok([("", params)]):
            return False
        stream, index = self.selection
        steps = self.steps_of(stream)
        prefix = steps[:index]
        top = steps[index].top if index < len(steps) else ()
        picked = forced_text
        if picked is None and token_id is not None:
            picked = next((c.text for c in top if c.token_id == token_id), None)
        if token_id is None and picked is None:
            self.events.status("This token has neither an id nor a text to continue from.")
            return False
        for reply in list(self.replies.values()):
            if reply.message_id == message.id:
                self.events.cancel_requested(reply.id)
        self._start_reply(message, params, prefix, forced=ForcedToken(token_id, picked))
        self.events.status("Continuing from the picked token; the earlier reply is kept as a branch.")
        return True

    def compare_from(self: ChatModel, ref: TokenRef, variants: Sequence[Variant]) -> bool:
        """ "Compare from here": each variant redraws token ``ref`` and continues from it."""
        if self.busy():
            self.events.status("Wait for the replies being written, or stop them (Esc), to compare from a token.")
            return False
        message = self._message_for_continuation(ref)
        if message is None or not self._check_variants(variants) or not self.params_ok(variants):
            return False
        self._start_run(message, variants, self.steps_of(ref[0])[: ref[1]])
        return True

    def stop(self: ChatModel) -> None:
        for tag in list(self.replies):
            self.events.cancel_requested(tag)

    def set_enable_thinking(self: ChatModel, enabled: bool | None) -> None:
        """The panel's Thinking toggle: sent with every reply started from now on."""
        self.enable_thinking = enabled

    def update_live_params(self: ChatModel, params: SamplingParams, column: int = 0) -> None:
        """New parameters, from their next token, for column ``column`` of the compare runs
        being written; the main settings (column 0) also go to the single replies."""
        targets = [
            r
            for r in self.replies.values()
            if r.finished is None and (r.column == column if r.run is not None else column == 0)
        ]
        for reply in targets:  # an answer already written takes the answer's settings
            self.events.params_requested(reply.id, live_params_for(reply.steps, params))
        if targets:
            self.events.status("Parameters changed: they apply from the next token.")

    # Worker events ----------------------------------------------------------------------------

    def on_job_started(self: ChatModel, tag: int, request_id: int, prompt_tokens: int) -> None:
        reply = self.replies.get(tag)
        if reply is not None:
            reply.request_id = request_id
            if reply.run is None or reply.column == 0:
                # A server does not say how it tokenized the prompt (0): not reported, not 0. The
                # local engine's 0 is a scored text's, whose prompt is read with it: no words.
                if prompt_tokens > 0:
                    self.events.status(f"Prompt: {prompt_tokens} tokens")
                elif self.origin_of(reply.key).remote:
                    self.events.status("Prompt: tokens not reported by the server")

    def on_job_rejected(self: ChatModel, tag: int, exc: BaseException) -> None:
        reply = self.replies.pop(tag, None)
        if reply is None:
            return
        if reply.run is not None:  # a fork is refused as a whole
            for column in reply.run.columns:
                self.replies.pop(column.stream[1], None)
            self.live_runs.pop(reply.run.group, None)
        self.unanswered[reply.message_id] = REFUSED
        self._refresh_after_end()
        self.events.busy_changed(self.busy())
        self.events.errored(exc)

    def on_token(self: ChatModel, tag: int, step: TokenStep) -> None:
        reply = self.replies.get(tag)
        if reply is None:
            return
        reply.steps.append(step)
        if self.journal is not None:
            self.journal.token(reply.id, reply.message_id, self.model_name, reply.params, reply.steps)
        if len(reply.steps) > reply.prefix_len + 1 and step.params != (before := reply.steps[-2].params):
            settings = "The answer's settings" if variant_applied(before, step.params) else "New parameters"
            self.events.status(f"{settings} in force from token {step.index}.")
        self.events.tokens_added(reply.key)
        if self.follow_latest and self._followed == reply.key:
            self._set_selection((reply.key, len(reply.steps) - 1))

    def on_divergence(self: ChatModel, group: int, event: Divergence) -> None:
        """``event.pairs`` name the worker's tags (the replies), not engine request ids."""
        run = self.live_runs.get(group)
        if run is None:
            return
        columns = {column.stream[1]: i for i, column in enumerate(run.columns)}
        pairs = tuple((columns[a], columns[b]) for a, b in event.pairs)
        run.divergence.add(event.index, pairs, event.js, event.first_difference)
        self.events.divergence_added(run)

    def on_finished(self: ChatModel, tag: int, finished: Finished) -> None:
        reply = self.replies.get(tag)
        if reply is None:
            return
        reply.finished = finished
        self.events.reply_finished(finished)
        if finished.finish_reason == FinishReason.ERROR:
            kept = f" The {len(reply.steps)} tokens before it are kept." if reply.steps else ""
            self.events.status(f"The reply stopped: {finished.error}")
            self.events.errored(ReplyFailed(f"The reply stopped because of an error: {finished.error}.{kept}"))
        if reply.run is None:
            del self.replies[tag]
            if reply.new_steps or finished.finish_reason != FinishReason.CANCELLED:
                self._save_reply(reply, finished)
            else:
                self._drop(reply)
        elif all(self.replies[c.stream[1]].finished is not None for c in reply.run.columns):
            self._save_run(reply.run)
        self._refresh_after_end()
        self.events.busy_changed(self.busy())

    def _drop(self: ChatModel, reply: Reply) -> None:
        """A reply cancelled before its first new token: nothing is saved, the chat says so."""
        self.unanswered[reply.message_id] = CANCELLED_EARLY
        if self.journal is not None:
            self.journal.dropped(reply.id)

    def _refresh_after_end(self: ChatModel) -> None:
        """Redraw after a reply ended; one followed that left nothing (no token, no branch)
        leaves nothing selected: the inspector must not go on showing an older reply's token."""
        followed = self._followed
        gone = followed is not None and followed[0] == "reply" and followed[1] not in self.replies
        self._refresh(followed_gone=gone)
        if gone:
            self._followed = None  # from now on, the latest token is followed again

    # Internals ----------------------------------------------------------------------------------

    def _check_variants(self: ChatModel, variants: Sequence[Variant]) -> bool:
        if MIN_VARIANTS <= len(variants) <= MAX_VARIANTS:
            return True
        self.events.status(f"Compare needs {MIN_VARIANTS} to {MAX_VARIANTS} settings, got {len(variants)}.")
        return False

    def _new_id(self: ChatModel) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _add_turn(self: ChatModel, text: str, variants: Sequence[Variant]) -> Message | None:
        """The new user message's reply, or None when nothing may be added (no text, a reply
        still being written, settings the model would refuse)."""
        text = text.strip()
        if not text:
            return None
        if self.busy():
            self.events.status("A reply is still being written: stop it first (Esc).")
            return None
        if not self.params_ok(variants):
            return None
        self._settle_last_run()
        if self.conversation is None:
            self.conversation = self.store.new_conversation(self.system_prompt, text.splitlines()[0][:60])
            self.events.conversation_changed(self.conversation)
        last = self.thread[-1] if self.thread else None
        after_branch = last.branch.id if last is not None and last.branch is not None else None
        user = self.store.add_user_message(self.conversation.id, text, after_branch)
        reply = self.store.add_assistant_message(self.conversation.id, user.id)
        self.thread += [user, reply]
        return reply

    def _message_for_continuation(self: ChatModel, ref: TokenRef | None) -> Message | None:
        message = self.message_of(ref[0]) if ref is not None else None
        if message is None or message.role != "assistant":
            return None
        if any(r.run is not None and r.message_id == message.id for r in self.replies.values()):
            self.events.status("This message is being compared: wait for the columns to finish.")
            return None
        return message

    def _start_reply(
        self: ChatModel,
        message: Message,
        params: SamplingParams,
        prefix=(),
        forced: ForcedToken | None = None,
    ) -> Reply:
        """A new reply to ``message``; with ``forced``, a branch: ``prefix`` (the reply's steps
        before it) then that token."""
        params = with_seed(params)  # "random each reply": drawn now, so the reply can be written again
        reply = Reply(self._new_id(), message.id, params, list(prefix), len(prefix))
        self.replies[reply.id] = reply
        output = tuple(s.token_id for s in prefix)  # None where a server sent no id: text below
        self._follow(reply.key)
        self._refresh()
        self.events.busy_changed(True)
        text = "".join(s.text for s in prefix)
        carry = carry_from_steps(prefix) or None  # mirostat's μ as the reply left it
        job = ChatJob(reply.id, self.context_for(message), params, output, forced, text, carry, self.enable_thinking)
        self.events.job_submitted(job)
        return reply

    def _start_run(self: ChatModel, message: Message, variants: Sequence[Variant], prefix=()) -> CompareRun:
        run = CompareRun(message.id, [], len(prefix), group=self._new_id())
        for column, (label, params) in enumerate(variants):
            params = with_seed(params)  # each column its own, unless the settings name one
            reply = Reply(self._new_id(), message.id, params, list(prefix), len(prefix), run=run, column=column)
            self.replies[reply.id] = reply
            run.columns.append(CompareColumn(label, params, reply.key))
        run.divergence = DivergenceSeries(len(run.columns))
        self.live_runs[run.group] = run
        self._follow(run.columns[0].stream)
        self._refresh()
        self.events.busy_changed(True)
        tags = tuple(c.stream[1] for c in run.columns)
        output = tuple(s.token_id for s in prefix)
        params = tuple(c.params for c in run.columns)
        text = "".join(s.text for s in prefix)
        carry = carry_from_steps(prefix) or None
        self.events.job_submitted(
            ForkJob(run.group, tags, self.context_for(message), params, output, text, carry, self.enable_thinking)
        )
        return run

    def _save_reply(self: ChatModel, reply: Reply, finished: Finished) -> None:
        # The row now (its id names the stream from here on), the steps once serialized.
        branch = self.store.add_branch(
            reply.message_id, reply.steps, finished.text, finished.finish_reason, self.model_name, reply.params, "[]"
        )
        if self.journal is not None:
            self.journal.saved(reply.id, branch.id)
        self._write_steps(branch.id, reply.steps)
        self.unanswered.pop(reply.message_id, None)
        message = self._message(reply.message_id)
        if message is not None:
            message.branches.append(branch)
            message.active = len(message.branches) - 1
            self._branches[branch.id] = (message, branch)
            if message is not self.thread[-1]:
                self._reload_after(message)
        self._rename(reply.key, branch_key(branch.id))

    def _save_run(self: ChatModel, run: CompareRun) -> None:
        replies = [self.replies.pop(c.stream[1]) for c in run.columns]
        self.live_runs.pop(run.group, None)
        run.group = None
        if all(not r.new_steps and r.finished.finish_reason == FinishReason.CANCELLED for r in replies):
            for reply in replies:
                self._drop(reply)
            return
        columns = [
            (c, r.steps, r.finished.text, r.finished.finish_reason) for c, r in zip(run.columns, replies, strict=True)
        ]
        run.id, branches = self.store.add_compare_run(
            run.message_id, columns, self.model_name, run.prefix_tokens, run.divergence, steps_later=True
        )
        self.unanswered.pop(run.message_id, None)
        message = self._message(run.message_id)
        for branch, reply in zip(branches, replies, strict=True):
            if self.journal is not None:
                self.journal.saved(reply.id, branch.id)
            self.runs[branch.id] = run
            self._write_steps(branch.id, reply.steps)
            if message is not None:
                message.branches.append(branch)
                self._branches[branch.id] = (message, branch)
        if message is not None:
            message.active = len(message.branches) - len(branches)
            if message is not self.thread[-1]:
                self._reload_after(message)
        for column, reply, branch in zip(run.columns, replies, branches, strict=True):
            column.stream = branch_key(branch.id)
            self._rename(reply.key, column.stream)

    def _write_steps(self: ChatModel, branch_id: int, steps: list[TokenStep]) -> None:
        """Serialize a saved reply's steps off the GUI thread, then write them."""
        steps = list(steps)

        def then(result: str | BaseException) -> None:
            if isinstance(result, BaseException):
                self.events.errored(result)
            else:
                self.store.set_branch_steps(branch_id, result)

        self.background(lambda: steps_to_json(steps, pause=lambda: time.sleep(0)), then)
