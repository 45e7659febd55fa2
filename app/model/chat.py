"""The app's state, without Qt: the open conversation, the replies being written, compare
runs, and the selected token, named by stable ids. It emits events; views subscribe.

:class:`ChatModel` is made of parts, each holding one kind of state and taking only the
collaborators it uses: the conversation and its thread
(:class:`app.model.conversation_thread.ConversationThread`), the streams being written and
the queries over every stream (:class:`app.model.streams.Streams`), the selection and the
reply followed (:class:`app.model.selection.Selection`), the served requests
(:class:`app.model.served.ServedRequests`), and the commands that start replies with the
worker's reports on them (:class:`app.model.generation.Generation`). The chat itself builds
the entries the views draw and keeps the selection valid (:meth:`ChatModel.refresh`).

The window wires it to the worker: ``events.job_submitted`` / ``cancel_requested`` /
``params_requested`` go to the engine's thread, and the worker's signals come back to the
``on_*`` handlers of its ``generation``. Tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.model.background import Background, RunNow
from app.model.chat_events import ChatEvents
from app.model.conversation_thread import ConversationThread
from app.model.entries import ChatEntry, build_entries, context_before, latest_token
from app.model.generation import Generation
from app.model.model_in_use import ModelInUse
from app.model.reply_checks import ReplyReading
from app.model.reply_origin import ReplyOrigin
from app.model.scoring import Scoring
from app.model.selection import Selection
from app.model.served import ServedRequests
from app.model.streams import Reply, Streams
from app.store.compare_runs import COLUMN_NAMES, CompareRun, StreamKey, TokenRef, branch_key
from app.store.store import Message, Store
from engine.api.events import TokenStep
from engine.api.params import SamplingParams, SamplingParamsError
from engine.remote.servers import refused_by

DEFAULT_SYSTEM = "You are a helpful assistant."


def _part(name: str, attr: str, doc: str = "") -> property:
    """An attribute of the chat that is its part ``name``'s ``attr`` (read and written there)."""
    return property(
        lambda self: getattr(getattr(self, name), attr),
        lambda self, value: setattr(getattr(self, name), attr, value),
        doc=doc or f"``{name}.{attr}``.",
    )


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
        self.events = events = ChatEvents()
        self.opened = ConversationThread(store, self.background, system_prompt)
        """The conversation and its thread."""
        self.streams = Streams(self.opened, self.in_use)
        """The replies being written, and every stream's steps, message, run and origin."""
        self.selected = Selection(events.selection_changed, events.stream_renamed)
        """The selected token and the reply followed."""
        self.entries: list[ChatEntry] = []
        self.welcome_state = ""
        self.served = ServedRequests(
            store,
            self.in_use,
            self.streams.replies,
            self.new_id,
            lambda: self.opened.conversation.id if self.opened.conversation is not None else None,
            events.status,
            events.job_submitted,
        )
        """Requests from the app's own server (the Served list)."""
        self.reading = ReplyReading(self.streams, self.selected, self.context_for, self.served.raw_prompt)
        """What the analyses of a reply read of the chat."""
        self.generation = Generation(
            self.opened,
            self.streams,
            self.selected,
            self.served,
            events,
            self.params_ok,
            self.context_for,
            self.refresh,
        )
        """Starting replies and compare runs, and the worker's reports on them."""
        self.refresh()

    # The parts' state, read and written where it is held ------------------------------------

    conversation = _part("opened", "conversation")
    system_prompt = _part("opened", "system_prompt")
    new_chat_system = _part("opened", "new_chat_system")
    thread = _part("opened", "thread")
    branches = _part("opened", "branches")
    runs = _part("opened", "runs", "Saved compare runs, by the id of each of their branches.")
    unanswered = _part("opened", "unanswered")
    replies = _part("streams", "replies", "The replies being written, by tag.")
    live_runs = _part("streams", "live_runs", "Compare runs being written, by group id.")
    selection = _part("selected", "ref", "The selected token: (stream, index), or None.")
    follow_latest = _part("selected", "follow_latest")
    followed = _part("selected", "followed")

    def scoring(self, in_use: ModelInUse) -> Scoring:
        """Score text, replay, export and import over this chat's parts (the window's one)."""
        renamed = self.events.stream_renamed
        return Scoring(self.reading, self.opened, self.generation, self.select, self.new_chat, renamed, in_use)

    def new_id(self) -> int:
        """A new tag: a reply's, a compare run's group, a scored text's or a replay's."""
        return self.generation.new_id()

    # The model in use ----------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """The loaded model's name, recorded with every reply ("?" before one has loaded)."""
        return self.streams.model_name

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
        return self.streams.busy()

    def shows(self, reply: Reply) -> bool:
        """Whether ``reply`` belongs to the open conversation (``Streams.shows``)."""
        return self.streams.shows(reply)

    def steps_of(self, stream: StreamKey | None) -> list[TokenStep] | None:
        """The steps of a stream (a reply being written or a saved branch), or None."""
        return self.streams.steps_of(stream)

    def message_of(self, stream: StreamKey) -> Message | None:
        return self.streams.message_of(stream)

    def run_of(self, stream: StreamKey | None) -> CompareRun | None:
        """The compare run ``stream`` is a column of (live or saved), if any."""
        return self.streams.run_of(stream)

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
        """What a reply was computed in (``Streams.precision_of``)."""
        return self.streams.precision_of(stream)

    def origin_of(self, stream: StreamKey | None) -> ReplyOrigin:
        """What wrote a reply (``Streams.origin_of``); every view labels the reply by it."""
        return self.streams.origin_of(stream)

    def last_assistant(self) -> Message | None:
        return self.opened.last_assistant()

    def context_for(self, message: Message) -> tuple[dict[str, str], ...]:
        thread = self.opened.thread
        index = thread.index(message)
        served = self.served.context(thread, index)  # a served request's own messages, then what followed
        return served if served is not None else context_before(thread, index, self.opened.system_prompt.strip())

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
        return self.opened.message(message_id)

    # Selection -----------------------------------------------------------------------------

    def select(self, ref: TokenRef | None) -> None:
        """Select a token by stream and index; selecting the newest token of a reply being
        written follows that reply as it grows."""
        if ref is not None:
            steps = self.steps_of(ref[0])
            if steps is None or not 0 <= ref[1] < len(steps):
                return
            self.selected.follow_latest = ref[0][0] == "reply" and ref[1] == len(steps) - 1
            if self.selected.follow_latest:
                self.selected.followed = ref[0]
        self.selected.set(ref)

    def select_index(self, index: int) -> None:
        """Another token of the selected stream (a click on the timeline)."""
        if self.selection is not None:
            self.select((self.selection[0], index))

    def select_column(self, column: int, index: int) -> None:
        """Token ``index`` of column ``column`` of the shown compare run."""
        run = self.shown_run()
        if run is not None and 0 <= column < len(run.columns):
            self.select((run.columns[column].stream, index))

    # Entries -------------------------------------------------------------------------------

    def set_welcome_state(self, text: str) -> None:
        self.welcome_state = text
        if not self.thread and not self.replies:
            self.refresh()

    def set_system_prompt(self, text: str) -> None:
        if self.opened.set_system_prompt(text):  # typed: the person's, for new chats too
            self.refresh()

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
        self.selected.set(selection)

    # Conversations -------------------------------------------------------------------------

    def open_conversation(self, conversation_id: int) -> bool:
        conversation = self.store.reads.conversation(conversation_id)
        if conversation is None:
            return False
        self.generation.stop(served=False)  # a served reply goes on: its client waits for it
        self.served.settle(conversation_id)  # a served reply still being saved on its writer's thread
        self.opened.open(conversation)  # after the replies still being written to the store
        writing = next((r.key for r in self.replies.values() if r.served_in == conversation_id), None)
        self.selected.reset(followed=writing)
        self.served.opened(conversation_id)
        self.events.conversation_changed(conversation)
        self.refresh()
        self.events.busy_changed(self.busy())
        return True

    def new_chat(self) -> None:
        self.generation.stop(served=False)
        self.opened.clear()
        self.served.opened(None)
        self.selected.reset()
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
        self.opened.activate(message, index)
        self.refresh()

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
            self.selected.set((branch_key(branch_id), self.selection[1]))
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
