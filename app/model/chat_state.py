"""What :class:`app.model.generation.Generation` may read and change of the chat it works
on (:class:`app.model.chat.ChatModel`), declared: the generation holds the chat by this
protocol, so neither module imports the other's class."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.model.background import Background
from app.model.chat_events import ChatEvents
from app.model.reply_origin import ReplyOrigin
from app.model.served import ServedRequests
from app.model.streams import Reply
from app.store.compare_runs import CompareRun, StreamKey, TokenRef
from app.store.store import Branch, Conversation, Message, Store
from engine.api.events import TokenStep
from engine.api.params import SamplingParams


class ChatState(Protocol):
    """What :class:`Generation` reads and changes of :class:`app.model.chat.ChatModel`."""

    store: Store
    background: Background
    events: ChatEvents
    conversation: Conversation | None
    system_prompt: str
    thread: list[Message]
    replies: dict[int, Reply]
    """The replies being written, by tag."""
    live_runs: dict[int, CompareRun]
    runs: dict[int, CompareRun]
    branches: dict[int, tuple[Message, Branch]]
    unanswered: dict[int, str]
    selection: TokenRef | None
    follow_latest: bool
    followed: StreamKey | None
    served: ServedRequests
    """Requests from the app's own server (``app.model.served``)."""

    @property
    def model_name(self) -> str: ...

    def busy(self) -> bool: ...
    def shows(self, reply: Reply) -> bool: ...
    def steps_of(self, stream: StreamKey | None) -> list[TokenStep] | None: ...
    def message_of(self, stream: StreamKey) -> Message | None: ...
    def message(self, message_id: int) -> Message | None: ...
    def origin_of(self, stream: StreamKey | None) -> ReplyOrigin: ...
    def last_assistant(self) -> Message | None: ...
    def context_for(self, message: Message) -> tuple[dict[str, str], ...]: ...
    def params_ok(self, variants: Sequence[tuple[str, SamplingParams]]) -> bool: ...
    def follow(self, stream: StreamKey) -> None: ...
    def set_selection(self, ref: TokenRef | None) -> None: ...
    def rename_stream(self, old: StreamKey, new: StreamKey) -> None: ...
    def reload_after(self, message: Message) -> None: ...
    def refresh(self, followed_gone: bool = False) -> None: ...
