"""The app's state, without Qt: the open conversation, the replies being written, compare
runs, and the selected token, named by stable ids. It emits events; views subscribe.

The window wires it to the worker: ``events.job_submitted`` / ``cancel_requested`` /
``params_requested`` go to the engine's thread, and the worker's signals come back to the
``on_*`` handlers of its ``generation`` (:class:`app.model.generation.Generation`). Tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.model.background import Background, RunNow
from app.model.chat_events import ChatEvents
from app.model.entries import ChatEntry, build_entries, context_before, last_assistant_index, latest_token
from app.model.generation import Generation
from app.model.model_in_use import ModelInUse
from app.model.reply_origin import ReplyOrigin
from app.model.served import ServedRequests
from app.model.streams import Reply
from app.store.compare_runs import COLUMN_NAMES, CompareRun, StreamKey, TokenRef, branch_key
from app.store.store import Branch, Conversation, Message, Store
from engine.api.events import TokenStep
from engine.api.params import SamplingParams, SamplingParamsError
from engine.remote.servers import refused_by

DEFAULT_SYSTEM = "You are a helpful assistant."


class ChatModel:
    def __init__(
        self,
        store: Store,
        system_prompt: str = DEFAULT_SYSTEM,
        background: Background | None = None,
        in_use: ModelInUse | None = None,
    ) -> None:
        self.store = store
        self.in_use = in_use if in_use is not None else ModelInUse()
        """The model in use (the shell's loader updates it): its name, vocabulary and server
        are read from it, never copied here."""
        self.background: Background = background or RunNow()
        self.events = ChatEvents()
        self.conversation: Conversation | None = None
        self.system_prompt = system_prompt
        self.new_chat_system = system_prompt
        """What a new chat starts with: the default, or the last one the person typed; never a
        prompt an opened conversation (an imported export's empty one) brought with it."""
        self.thread: list[Message] = []
        self.replies: dict[int, Reply] = {}
        self.live_runs: dict[int, CompareRun] = {}  # by group id
        self.runs: dict[int, CompareRun] = {}  # saved runs, by the id of each of their branches
        self.entries: list[ChatEntry] = []
        self.selection: TokenRef | None = None
        self.follow_latest = True
        self.welcome_state = ""
        self.unanswered: dict[int, str] = {}
        """Messages whose last reply ended before its first token, and how (shown in the chat)."""
        self.followed: StreamKey | None = None
        self.branches: dict[int, tuple[Message, Branch]] = {}
        self.generation = Generation(self)
        """Starting replies and compare runs, and the worker's reports on them."""
        self.served = ServedRequests(self)
        """Requests from the app's own server (the Served list)."""
        self.refresh()

    # The model in use ----------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """The loaded model's name, recorded with every reply ("?" before one has loaded)."""
        info = self.in_use.info
        return info.name if info is not None else "?"

    @property
    def vocab_size(self) -> int:
        """The loaded model's vocabulary size, for logit-bias ids (0 = not known: not checked)."""
        info = self.in_use.info
        return info.vocab_size if info is not None else 0

    @property
    def server(self) -> str:
        """The kind of the server in use (``ModelInfo.server``; "" = local): what it cannot apply is refused."""
        info = self.in_use.info
        return info.server if info is not None else ""

    # Queries -------------------------------------------------------------------------------

    def busy(self) -> bool:
        """A reply of the open conversation is being written (the app's own, or a served one)."""
        return any(self.shows(r) for r in self.replies.values())

    def shows(self, reply: Reply) -> bool:
        """Whether ``reply`` belongs to the open conversation: every reply of the app's own,
        a served one only while its conversation is open."""
        return reply.served_in is None or (self.conversation is not None and reply.served_in == self.conversation.id)

    def steps_of(self, stream: StreamKey | None) -> list[TokenStep] | None:
        """The steps of a stream (a reply being written or a saved branch), or None."""
        if stream is None:
            return None
        kind, ident = stream
        if kind == "reply":
            reply = self.replies.get(ident)
            return reply.steps if reply is not None else None
        found = self.branches.get(ident)
        return found[1].steps if found is not None else None

    def message_of(self, stream: StreamKey) -> Message | None:
        kind, ident = stream
        if kind == "reply":
            reply = self.replies.get(ident)
            return self.message(reply.message_id) if reply is not None else None
        found = self.branches.get(ident)
        return found[0] if found is not None else None

    def run_of(self, stream: StreamKey | None) -> CompareRun | None:
        """The compare run ``stream`` is a column of (live or saved), if any."""
        if stream is None:
            return None
        if stream[0] == "reply":
            reply = self.replies.get(stream[1])
            return reply.run if reply is not None else None
        return self.runs.get(stream[1])

    def shown_run(self, stream: StreamKey | None = None) -> CompareRun | None:
        """The run whose columns are shown side by side and include ``stream`` (default: the
        selection's): live, or saved and not decided yet."""
        run = self.run_of(stream if stream is not None else (self.selection[0] if self.selection else None))
        return run if run is not None and (run.live or run.kept is None) else None

    def selected_step(self) -> TokenStep | None:
        if self.selection is None:
            return None
        steps = self.steps_of(self.selection[0])
        index = self.selection[1]
        return steps[index] if steps is not None and 0 <= index < len(steps) else None

    def precision_of(self, stream: StreamKey | None) -> str | None:
        """What a reply was computed in: a saved branch's own record (None: not recorded), a
        reply being written the loaded model's (``Store.note_model``)."""
        if stream is None:
            return None
        if stream[0] == "reply":
            return self.store.model_precisions.get(self.model_name)
        found = self.branches.get(stream[1])
        return found[1].precision if found is not None else None

    def origin_of(self, stream: StreamKey | None) -> ReplyOrigin:
        """What wrote a reply (``app.model.reply_origin``): a saved branch's own record, a
        reply being written the loaded model's; every view labels the reply by it."""
        if stream is None:
            return ReplyOrigin()
        steps = self.steps_of(stream) or ()
        if stream[0] == "reply":
            store, name = self.store, self.model_name
            return ReplyOrigin.of(
                name,
                store.model_sources.get(name),
                store.model_precisions.get(name),
                store.model_backends.get(name),
                steps,
            )
        found = self.branches.get(stream[1])
        if found is None:
            return ReplyOrigin()
        branch = found[1]
        return ReplyOrigin.of(branch.model, branch.model_source, branch.precision, branch.backend, steps)

    def last_assistant(self) -> Message | None:
        index = last_assistant_index(self.thread)
        return self.thread[index] if index is not None else None

    def context_for(self, message: Message) -> tuple[dict[str, str], ...]:
        index = self.thread.index(message)
        served = self.served.context(self.thread, index)  # a served request's own messages, then what followed
        return served if served is not None else context_before(self.thread, index, self.system_prompt.strip())

    def params_ok(self, variants: Sequence[tuple[str, SamplingParams]]) -> bool:
        """Whether the model in use takes every setting (``(label, params)``; "" for a single
        reply): logit-bias ids in its vocabulary, and what a server cannot apply. Else
        ``errored`` carries the first refusal, its ``field`` for the panel to outline and its
        message naming every one, and nothing may be started or added to the conversation."""
        for column, (label, params) in enumerate(variants):
            errors = refused_by(self.server, params)
            if self.vocab_size > 0:
                try:
                    params.verify(self.vocab_size)
                except SamplingParamsError as exc:
                    errors.insert(0, exc)
            if errors:
                words = " ".join(str(exc) for exc in errors)
                if len(variants) > 1:
                    where = f"Setting {COLUMN_NAMES[column]} ({label})" if label else f"Setting {COLUMN_NAMES[column]}"
                    words = f"{where}: {words}"
                self.events.errored(SamplingParamsError(errors[0].field, errors[0].value, words))
                return False
        return True

    def message(self, message_id: int) -> Message | None:
        return next((m for m in self.thread if m.id == message_id), None)

    # Selection -----------------------------------------------------------------------------

    def select(self, ref: TokenRef | None) -> None:
        """Select a token by stream and index; selecting the newest token of a reply being
        written follows that reply as it grows."""
        if ref is not None:
            steps = self.steps_of(ref[0])
            if steps is None or not 0 <= ref[1] < len(steps):
                return
            self.follow_latest = ref[0][0] == "reply" and ref[1] == len(steps) - 1
            if self.follow_latest:
                self.followed = ref[0]
        self.set_selection(ref)

    def select_index(self, index: int) -> None:
        """Another token of the selected stream (a click on the timeline)."""
        if self.selection is not None:
            self.select((self.selection[0], index))

    def select_column(self, column: int, index: int) -> None:
        """Token ``index`` of column ``column`` of the shown compare run."""
        run = self.shown_run()
        if run is not None and 0 <= column < len(run.columns):
            self.select((run.columns[column].stream, index))

    def set_selection(self, ref: TokenRef | None) -> None:
        if ref != self.selection:
            self.selection = ref
            self.events.selection_changed(ref)

    def follow(self, stream: StreamKey) -> None:
        self.followed = stream
        self.follow_latest = True

    def rename_stream(self, old: StreamKey, new: StreamKey) -> None:
        if self.followed == old:
            self.followed = new
        self.events.stream_renamed(old, new)
        if self.selection is not None and self.selection[0] == old:
            self.set_selection((new, self.selection[1]))

    # Entries -------------------------------------------------------------------------------

    def set_welcome_state(self, text: str) -> None:
        self.welcome_state = text
        if not self.thread and not self.replies:
            self.refresh()

    def set_system_prompt(self, text: str) -> None:
        if text == self.system_prompt:
            return
        self.system_prompt = self.new_chat_system = text  # typed: the person's, for new chats too
        if self.conversation is not None:
            self.store.writes.update_conversation(self.conversation.id, system_prompt=text)
        self.refresh()

    def _index_branches(self) -> None:
        self.branches = {b.id: (m, b) for m in self.thread for b in m.branches}

    def refresh(self, followed_gone: bool = False) -> None:
        """Rebuild the entries (cheap: no token is copied), then keep the selection valid.
        ``followed_gone``: the reply being followed ended without a token (cancelled in its
        prefill, refused): nothing is selected, rather than an earlier reply's last token."""
        self.entries = build_entries(
            self.thread,
            [r for r in self.replies.values() if self.shows(r)],
            self.runs,
            self.system_prompt.strip(),
            self.welcome_state,
            self.unanswered,
        )
        self.events.entries_changed()
        selection = self.selection
        if selection is not None:
            steps = self.steps_of(selection[0])
            if steps is None or selection[1] >= len(steps):
                selection = None
        if self.follow_latest or selection is None:
            followed = self.followed
            selection = latest_token(self.entries, lambda s: s == followed)
            if selection is None and not followed_gone:
                selection = latest_token(self.entries)
        self.set_selection(selection)

    # Conversations -------------------------------------------------------------------------

    def open_conversation(self, conversation_id: int) -> bool:
        conversation = self.store.reads.conversation(conversation_id)
        if conversation is None:
            return False
        self.generation.stop(served=False)  # a served reply goes on: its client waits for it
        self.background.wait()  # replies still being written to the store
        self.served.settle(conversation_id)  # and a served one, on its writer's thread
        self.conversation = conversation
        self.system_prompt = conversation.system_prompt
        self.thread = self.store.reads.thread(conversation_id)
        self._index_branches()
        self.unanswered = {}
        self.runs = {}
        for run in self.store.reads.compare_runs(conversation_id):
            for column in run.columns:
                self.runs[column.stream[1]] = run
        self.selection, self.follow_latest, self.followed = None, True, None
        self.followed = next((r.key for r in self.replies.values() if r.served_in == conversation_id), None)
        self.served.opened(conversation_id)
        self.events.conversation_changed(conversation)
        self.refresh()
        self.events.busy_changed(self.busy())
        return True

    def new_chat(self) -> None:
        self.generation.stop(served=False)
        self.conversation = None
        self.served.opened(None)
        self.system_prompt = self.new_chat_system
        self.thread, self.runs, self.branches = [], {}, {}
        self.unanswered = {}
        self.selection, self.follow_latest, self.followed = None, True, None
        self.events.conversation_changed(None)
        self.refresh()
        self.events.busy_changed(self.busy())

    def delete_conversation(self) -> None:
        if self.conversation is not None:
            # Its replies being written stop and are forgotten now: there is no message left
            # to save them under (a served one's client gets the end of its reply).
            for tag, reply in list(self.replies.items()):
                if self.shows(reply):
                    self.events.cancel_requested(tag)
                    del self.replies[tag]
                    if self.generation.journal is not None:
                        self.generation.journal.dropped(tag)
            self.store.writes.delete_conversation(self.conversation.id)
            self.served.forget(self.conversation.id)
            self.new_chat()

    def step_branch(self, message_id: int, delta: int) -> None:
        """Show the message's previous (-1) or next (+1) branch, and the turns that follow it."""
        message = self.message(message_id)
        if message is None or not message.branches or self.busy():
            return
        self._activate(message, (message.active + delta) % len(message.branches))

    def _activate(self, message: Message, index: int) -> None:
        self.store.writes.set_active_branch(message.id, message.branches[index].id)
        message.active = index
        self.reload_after(message)
        self.refresh()

    def reload_after(self, message: Message) -> None:
        """The turns after ``message`` follow its active branch: read them again."""
        if self.conversation is None or message not in self.thread:
            return
        i = self.thread.index(message)
        self.background.wait()
        rest = self.store.reads.thread(self.conversation.id, message.branch.id) if message.branch else []
        self.thread = self.thread[: i + 1] + rest
        self._index_branches()

    # Compare runs ---------------------------------------------------------------------------

    def keep_column(self, message_id: int, column: int) -> None:
        """Make column ``column`` of the message's undecided compare run its reply; the other
        columns stay as branches of the message."""
        message = self.message(message_id)
        run = self.runs.get(message.branch.id) if message is not None and message.branch else None
        if run is None or run.id is None or not 0 <= column < len(run.columns):
            return
        branch_id = run.columns[column].stream[1]
        self.store.writes.set_compare_kept(run.id, column)
        run.kept = column
        if self.selection is not None and run.column_of(self.selection[0]) is not None:
            self.set_selection((branch_key(branch_id), self.selection[1]))
        self._activate(message, [b.id for b in message.branches].index(branch_id))

    def show_compare(self, message_id: int) -> None:
        """Show a kept compare run's columns side by side again."""
        message = self.message(message_id)
        run = self.runs.get(message.branch.id) if message is not None and message.branch else None
        if run is None or run.id is None or run.kept is None:
            return
        self.store.writes.set_compare_kept(run.id, None)
        run.kept = None
        self.refresh()
