"""What the chat shows and what the model is sent, derived from the stored thread, the
replies being written and the compare runs. Plain Python: the chat view draws these.

Each entry has a stable ``key`` (the message it shows) and a :meth:`ChatEntry.header`
(everything drawn besides the tokens), so a view can tell an entry whose tokens only
grew from one that must be redrawn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from app.model.scored import is_scored, score_context
from app.model.seeds import reply_seed
from app.model.streams import Reply
from app.model.structured import heading_note
from app.store.compare_runs import CompareRun, StreamKey, branch_key
from app.store.store import Message
from engine.api.events import FinishReason, TokenStep

WELCOME = "\n".join(
    [
        "Every token of a reply can be clicked: the Inspector (right) shows each candidate's probability after"
        " every sampling stage, from what the model wanted (raw) to what was left to draw from.",
        "The Timeline (bottom) shows how sure the model was at each token; red rings mark tokens that were not"
        " its first choice, dashed lines where you changed the sampling chain (left: drag to reorder) mid-reply.",
        "Double-click another candidate in the Inspector to continue the reply from it; ‹ › switches branches."
        " Tick Compare (left) to send one prompt with 2–4 settings side by side.",
    ]
)
PREFIX_CHARS = 160
CANCELLED_EARLY = "cancelled before the first token"
"""A reply stopped during its prompt's prefill: nothing to keep, but the chat says so."""
REFUSED = "not started: the request was refused"
NO_REPLY = "no reply: stopped before its first token"
"""A turn saved without a reply (a reply cancelled, refused or killed before its first token)."""


@dataclass(eq=False)
class ColumnEntry:
    """One column of a compare run: a stream shown from ``start`` on."""

    stream: StreamKey
    steps: list[TokenStep]
    start: int
    label: str
    streaming: bool = False
    note: str = ""
    seed: int | None = None

    def header(self) -> tuple:
        return (self.label, self.streaming, self.note, self.seed)


@dataclass(eq=False)
class ChatEntry:
    role: str  # "welcome" | "system" | "user" | "assistant" | "compare"
    text: str = ""
    steps: list[TokenStep] = field(default_factory=list)
    branch: int = 0
    branches: int = 1
    streaming: bool = False
    note: str = ""  # finish reason, errors
    key: tuple = ()
    stream: StreamKey | None = None
    message_id: int | None = None
    columns: list[ColumnEntry] = field(default_factory=list)
    prefix_text: str = ""
    """Compare from here: the end of the reply kept before the fork."""
    kept: str = ""
    """For a reply kept from a compare run: which column of how many."""
    finished: bool = False
    """For a compare run: every column is done (it can be kept)."""
    seed: int | None = None
    """The seed the reply was written with (shown, with "reuse")."""
    context: str = ""
    """A text scored without a prompt: its first token, the context the rest was read from,
    shown before the scored tokens and unscored (``app.model.scored.score_context``)."""

    def header(self) -> tuple:
        """Everything drawn besides the token bodies."""
        columns = tuple(c.header() for c in self.columns)
        return (
            self.role,
            self.text,
            self.branch,
            self.branches,
            self.streaming,
            self.note,
            columns,
            self.prefix_text,
            self.kept,
            self.finished,
            self.seed,
        )

    def bodies(self) -> list[tuple[StreamKey, list[TokenStep], int]]:
        """The token streams this entry draws: (stream, steps, first index shown)."""
        if self.role == "compare":
            return [(c.stream, c.steps, c.start) for c in self.columns]
        if self.role == "assistant" and self.stream is not None:
            return [(self.stream, self.steps, 0)]
        return []


def _note(finish_reason: str | None, steps: Sequence[TokenStep] = ()) -> str:
    """The reply's heading note: how it ended when not by a stop, and how it stands under its
    grammar (``app.model.structured.heading_note``)."""
    reason = "" if finish_reason in (FinishReason.STOP, None) else f"[{finish_reason}]"
    return " ".join(filter(None, (reason, heading_note(steps))))


def _prefix_text(steps: list[TokenStep], count: int) -> str:
    text = "".join(s.text for s in steps[:count])
    return text if len(text) <= PREFIX_CHARS else "…" + text[-PREFIX_CHARS:]


def _live_run_entry(message: Message, run: CompareRun, replies: dict[StreamKey, Reply]) -> ChatEntry:
    columns = []
    for i, column in enumerate(run.columns):
        reply = replies.get(column.stream)
        steps = reply.steps if reply is not None else []
        note = _note(reply.finished.finish_reason, steps) if reply is not None and reply.finished else ""
        streaming = reply is not None and reply.finished is None
        seed = reply_seed(reply.params, steps) if reply is not None else None
        columns.append(ColumnEntry(column.stream, steps, run.prefix_tokens, run.label(i), streaming, note, seed))
    return _compare_entry(message, run, columns, live=True)


def _saved_run_entry(message: Message, run: CompareRun) -> ChatEntry:
    branches = {branch_key(b.id): b for b in message.branches}
    columns = []
    for i, column in enumerate(run.columns):
        branch = branches.get(column.stream)
        steps = branch.steps if branch is not None else []
        note = _note(branch.finish_reason, steps) if branch is not None else "[missing]"
        seed = reply_seed(branch.params, steps) if branch is not None else None
        columns.append(ColumnEntry(column.stream, steps, run.prefix_tokens, run.label(i), False, note, seed))
    return _compare_entry(message, run, columns, live=False)


def _compare_entry(message: Message, run: CompareRun, columns: list[ColumnEntry], live: bool) -> ChatEntry:
    """A compare run's entry: streaming while its replies are written, finished once saved."""
    first = columns[0].steps if columns else []
    return ChatEntry(
        "compare",
        key=("assistant", message.id),
        message_id=message.id,
        columns=columns,
        streaming=live,
        prefix_text=_prefix_text(first, run.prefix_tokens),
        finished=not live,
    )


def build_entries(
    thread: list[Message],
    replies: Iterable[Reply],
    runs_by_branch: dict[int, CompareRun],
    system: str,
    welcome_state: str,
    unanswered: dict[int, str] | None = None,
) -> list[ChatEntry]:
    """One entry per shown message; a reply being written replaces its message's branch,
    a compare run not yet decided shows its columns side by side. ``unanswered``: why the
    last reply started for a message left no branch (a message id's note, e.g.
    :data:`CANCELLED_EARLY`); an assistant message without any branch says so too."""
    unanswered = unanswered or {}
    replies = list(replies)
    entries = []
    if not thread and not replies:
        entries.append(ChatEntry("welcome", "\n".join([WELCOME, welcome_state]), key=("welcome",)))
    if system and thread:
        entries.append(ChatEntry("system", system, key=("system",)))
    singles = {r.message_id: r for r in replies if r.run is None}
    runs = {r.run.message_id: r.run for r in replies if r.run is not None}
    by_stream = {r.key: r for r in replies}
    user_turn = ""
    for message in thread:
        if message.role == "user":
            user_turn = message.content
            entries.append(ChatEntry("user", message.content, key=("user", message.id), message_id=message.id))
            continue
        key = ("assistant", message.id)
        if message.id in runs:
            entries.append(_live_run_entry(message, runs[message.id], by_stream))
            continue
        reply = singles.get(message.id)
        count = len(message.branches) + (1 if reply else 0)
        if reply is not None:
            entries.append(
                ChatEntry(
                    "assistant",
                    steps=reply.steps,
                    branch=count - 1,
                    branches=count,
                    streaming=True,
                    key=key,
                    stream=reply.key,
                    message_id=message.id,
                    seed=reply_seed(reply.params, reply.steps),
                    context=_context(user_turn, reply.steps),
                )
            )
            continue
        branch = message.branch
        if branch is None:  # no token to show, but a trace of the reply that did not come
            note = f"[{unanswered.get(message.id, NO_REPLY)}]"
            entries.append(ChatEntry("assistant", note=note, key=key, message_id=message.id, branches=0))
            continue
        run = runs_by_branch.get(branch.id)
        if run is not None and run.kept is None:
            entries.append(_saved_run_entry(message, run))
            continue
        kept = ""
        if run is not None and run.kept is not None:
            kept = f"kept {run.label(run.kept)} of {len(run.columns)} settings"
        note = _note(branch.finish_reason, branch.steps)
        if message.id in unanswered:  # a new reply (regenerated, continued) that did not come
            note = f"{note} [new reply {unanswered[message.id]}]".strip()
        entries.append(
            ChatEntry(
                "assistant",
                branch.text,
                branch.steps,
                message.active,
                count,
                note=note,
                key=key,
                stream=branch_key(branch.id),
                message_id=message.id,
                kept=kept,
                seed=reply_seed(branch.params, branch.steps),
                context=_context(user_turn, branch.steps),
            )
        )
    return entries


def _context(user_turn: str, steps: Sequence[TokenStep]) -> str:
    """The unscored first token of a text scored without a prompt ("" for anything else)."""
    if not steps or not is_scored(steps[0]):
        return ""
    return score_context(user_turn, "".join(s.text for s in steps[:64]))


def context_before(thread: list[Message], message_index: int, system: str) -> tuple[dict[str, str], ...]:
    """Chat messages for the model: the system prompt and every turn before the reply."""
    messages = [{"role": "system", "content": system}] if system else []
    for message in thread[:message_index]:
        if message.role == "user":
            messages.append({"role": "user", "content": message.content})
        elif message.branch is not None:
            messages.append({"role": "assistant", "content": message.branch.text})
    return tuple(messages)


def latest_token(entries: list[ChatEntry], prefer: Callable[[StreamKey], bool] | None = None) -> tuple | None:
    """The last token of the last entry that has one: ``(stream, index)``."""
    for entry in reversed(entries):
        for stream, steps, start in entry.bodies():
            if len(steps) > start and (prefer is None or prefer(stream)):
                return (stream, len(steps) - 1)
    return None
