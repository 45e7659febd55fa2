"""What the chat shows and what the model is sent, derived from the stored thread and the
replies being written. Plain Python, no Qt: the window only draws what this builds."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.store import Message
from engine.events import TokenStep
from engine.params import SamplingParams

WELCOME = "\n".join(
    [
        "Every token of a reply can be clicked: the Inspector (right) shows each candidate's probability after"
        " every sampling stage, from what the model wanted (raw) to what was left to draw from.",
        "The Timeline (bottom) shows how sure the model was at each token; red rings mark tokens that were not"
        " its first choice, dashed lines where you changed the sampling chain (left: drag to reorder) mid-reply.",
        "Double-click another candidate in the Inspector to continue the reply from it; ‹ › switches branches.",
    ]
)


@dataclass
class ChatEntry:
    role: str  # "welcome" | "system" | "user" | "assistant"
    text: str = ""
    steps: list[TokenStep] = field(default_factory=list)
    branch: int = 0
    branches: int = 1
    streaming: bool = False
    note: str = ""  # finish reason, errors


@dataclass
class LiveReply:
    """A reply being written: the tokens kept from the branch point, then the new ones."""

    message_id: int
    params: SamplingParams
    prefix: list[TokenStep] = field(default_factory=list)
    steps: list[TokenStep] = field(default_factory=list)
    request_id: int | None = None

    @property
    def all_steps(self) -> list[TokenStep]:
        return self.prefix + self.steps


def build_entries(thread: list[Message], live: list[LiveReply], system: str, welcome_state: str) -> list[ChatEntry]:
    """One entry per shown message; a reply being written replaces its message's branch."""
    entries = []
    if not thread and not live:
        entries.append(ChatEntry("welcome", "\n".join([WELCOME, welcome_state])))
    if system and thread:
        entries.append(ChatEntry("system", system))
    live_by_message = {reply.message_id: reply for reply in live}
    for message in thread:
        if message.role == "user":
            entries.append(ChatEntry("user", message.content))
            continue
        reply = live_by_message.get(message.id)
        count = len(message.branches) + (1 if reply else 0)
        if reply is not None:
            entries.append(
                ChatEntry("assistant", steps=reply.all_steps, branch=count - 1, branches=count, streaming=True)
            )
        elif message.branch is not None:
            branch = message.branch
            note = "" if branch.finish_reason == "stop" else f"[{branch.finish_reason}]"
            entries.append(ChatEntry("assistant", branch.text, list(branch.steps), message.active, count, note=note))
    return entries


def context_before(thread: list[Message], message_index: int, system: str) -> tuple[dict[str, str], ...]:
    """Chat messages for the model: the system prompt and every turn before the reply."""
    messages = [{"role": "system", "content": system}] if system else []
    for message in thread[:message_index]:
        if message.role == "user":
            messages.append({"role": "user", "content": message.content})
        elif message.branch is not None:
            messages.append({"role": "assistant", "content": message.branch.text})
    return tuple(messages)


def last_assistant_index(thread: list[Message]) -> int | None:
    for i in range(len(thread) - 1, -1, -1):
        if thread[i].role == "assistant":
            return i
    return None


def message_of_entry(entries: list[ChatEntry], thread: list[Message], entry_index: int) -> Message | None:
    offset = 1 if entries and entries[0].role == "system" else 0
    i = entry_index - offset
    return thread[i] if 0 <= i < len(thread) else None


def latest_token(entries: list[ChatEntry]) -> tuple[int, int] | None:
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].steps:
            return (i, len(entries[i].steps) - 1)
    return None
