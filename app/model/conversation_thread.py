"""The open conversation and the thread shown (Qt-free): a part of
:class:`app.model.chat.ChatModel` holding what is read from and written to the store for it
— its messages (each assistant message's active branch followed), the branches by id, the
saved compare runs, and the notes of messages left unanswered."""

from __future__ import annotations

from app.model.background import Background
from app.store.compare_runs import CompareRun
from app.store.store import Branch, Conversation, Message, Store


class ConversationThread:
    def __init__(self, store: Store, background: Background, system_prompt: str) -> None:
        self.store, self.background = store, background
        self.conversation: Conversation | None = None
        self.system_prompt = system_prompt
        self.new_chat_system = system_prompt
        """What a new chat starts with: the default, or the last one the person typed; never a
        prompt an opened conversation (an imported export's empty one) brought with it."""
        self.thread: list[Message] = []
        self.branches: dict[int, tuple[Message, Branch]] = {}
        """Every branch of the thread's messages, with its message, by the branch's id."""
        self.runs: dict[int, CompareRun] = {}
        """Saved compare runs, by the id of each of their branches."""
        self.unanswered: dict[int, str] = {}
        """Messages whose last reply ended before its first token, and how (shown in the chat)."""

    def message(self, message_id: int) -> Message | None:
        return next((m for m in self.thread if m.id == message_id), None)

    def last_assistant(self) -> Message | None:
        return next((m for m in reversed(self.thread) if m.role == "assistant"), None)

    def index_branches(self) -> None:
        self.branches = {b.id: (m, b) for m in self.thread for b in m.branches}

    def open(self, conversation: Conversation) -> None:
        """Read ``conversation`` (the replies still being written to the store first)."""
        self.background.wait()
        self.conversation = conversation
        self.system_prompt = conversation.system_prompt
        self.thread = self.store.reads.thread(conversation.id)
        self.index_branches()
        self.unanswered = {}
        self.runs = {}
        for run in self.store.reads.compare_runs(conversation.id):
            for column in run.columns:
                self.runs[column.stream[1]] = run

    def clear(self) -> None:
        """A new chat: no conversation until its first message, the new-chat system prompt."""
        self.conversation = None
        self.system_prompt = self.new_chat_system
        self.thread, self.runs, self.branches = [], {}, {}
        self.unanswered = {}

    def set_system_prompt(self, text: str) -> bool:
        """The person typed ``text`` (kept for new chats too); False when nothing changed."""
        if text == self.system_prompt:
            return False
        self.system_prompt = self.new_chat_system = text
        if self.conversation is not None:
            self.store.writes.update_conversation(self.conversation.id, system_prompt=text)
        return True

    def start_conversation(self, text: str) -> bool:
        """Before a first message ``text``: the conversation is made, titled by it (False:
        there was one)."""
        if self.conversation is not None:
            return False
        self.conversation = self.store.writes.new_conversation(self.system_prompt, text.splitlines()[0][:60])
        return True

    def add_turn(self, text: str) -> Message:
        """A user message ``text`` after the thread's last branch, and its assistant message
        (in the conversation :meth:`start_conversation` made)."""
        last = self.thread[-1] if self.thread else None
        after_branch = last.branch.id if last is not None and last.branch is not None else None
        user = self.store.writes.add_user_message(self.conversation.id, text, after_branch)
        reply = self.store.writes.add_assistant_message(self.conversation.id, user.id)
        self.thread += [user, reply]
        return reply

    def activate(self, message: Message, index: int) -> None:
        """Show ``message``'s branch ``index`` and the turns that follow it."""
        self.store.writes.set_active_branch(message.id, message.branches[index].id)
        message.active = index
        self.reload_after(message)

    def reload_after(self, message: Message) -> None:
        """The turns after ``message`` follow its active branch: read them again."""
        if self.conversation is None or message not in self.thread:
            return
        i = self.thread.index(message)
        self.background.wait()
        rest = self.store.reads.thread(self.conversation.id, message.branch.id) if message.branch else []
        self.thread = self.thread[: i + 1] + rest
        self.index_branches()

    def add_branch(self, message: Message, branch: Branch) -> None:
        """``branch`` was saved for ``message`` (a message of the thread)."""
        message.branches.append(branch)
        self.branches[branch.id] = (message, branch)
