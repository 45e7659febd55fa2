"""Why the selected reply cannot be checked, compared or read layer by layer (Check
precision…, Compare models…, the logit lens): each runs a saved reply of the loaded local
model through the engine again, so they refuse the same things in the same words; and the
text a prompt-less scored reply started from, which Compare models and the logit lens
tokenize again. Qt-free."""

from __future__ import annotations

from collections.abc import Callable

from app.model.scored import is_scored
from app.model.selection import Selection
from app.model.streams import Streams
from app.store.compare_runs import StreamKey, TokenRef
from app.store.scored_labels import SCORE_LABEL
from app.store.store import Branch, Message
from engine.api.events import FinishReason, TokenStep


class ReplyReading:
    """What the analyses of a reply read of the chat, and nothing else: the selection, every
    stream's steps and message, the messages a reply answers (``context_for``), and whether
    the open conversation continues a raw prompt (``raw_prompt``: a served completion's)."""

    def __init__(
        self,
        streams: Streams,
        selection: Selection,
        context_for: Callable[[Message], tuple[dict[str, str], ...]],
        raw_prompt: Callable[[], bool],
    ) -> None:
        self.streams, self.selected = streams, selection
        self.context_for, self.raw_prompt = context_for, raw_prompt

    @property
    def selection(self) -> TokenRef | None:
        return self.selected.ref

    @property
    def thread(self) -> list[Message]:
        return self.streams.thread.thread

    def steps_of(self, stream: StreamKey | None) -> list[TokenStep] | None:
        return self.streams.steps_of(stream)

    def message_of(self, stream: StreamKey) -> Message | None:
        return self.streams.message_of(stream)


def branch_of(reading: ReplyReading, stream: StreamKey) -> Branch | None:
    """The saved branch a ``("branch", id)`` stream names, or None."""
    message = reading.message_of(stream)
    return next((b for b in message.branches if b.id == stream[1]), None) if message is not None else None


def selected_reply_problem(reading: ReplyReading, model_name: str, verb: str, select_hint: str) -> str:
    """The sentence saying why the selected reply cannot be ``verb``-ed by the model named
    ``model_name`` ("" when it can); ``select_hint`` when nothing is selected."""
    stream = reading.selection[0] if reading.selection else None
    if stream is None:
        return select_hint
    if reading.raw_prompt():
        return (
            "The selected reply continues a raw prompt (/v1/completions), not a chat: "
            f"it cannot be run again to {verb} it."
        )
    if stream[0] != "branch":
        return f"The reply is still being written: {verb} it once it has ended."
    branch = branch_of(reading, stream)
    if branch is not None and branch.model != model_name:
        return f"The selected reply was written by {branch.model}: load it to {verb} the reply."
    steps = reading.steps_of(stream)
    if not steps:
        return "The selected reply has no tokens."
    if any(s.token_id is None for s in steps):
        return "The selected reply came from a server that did not report its token ids."
    return ""


def whole_text(label: str, scored: str) -> str | None:
    """The text a prompt-less score started from, its context token included: the saved
    reply holds the scored tokens' text only, and the user turn (``score_label``) the start
    of the text's first line, so the context is what of that line comes before the scored
    text. None when the turn is not such a label. The worker checks every token it
    reads again against the reply's own, so a text rebuilt wrongly is refused, never used."""
    if not label.startswith(SCORE_LABEL):
        return None
    line = label[len(SCORE_LABEL) :]
    for k in range(len(line)):
        if scored.startswith(line[k:]):
            return line[:k] + scored
    return None


def prompt_less_text(reading: ReplyReading, message: Message | None, branch: Branch) -> str | None:
    """A text scored without a prompt, whole: its first token was its context, so the worker
    tokenizes it again (``compare_text``, ``lens_text``) rather than rendering a chat. None
    for anything else (a reply, a text scored as the reply to a prompt)."""
    scored = branch.finish_reason == FinishReason.SCORED or (branch.steps and is_scored(branch.steps[0]))
    if not scored:
        return None
    thread = reading.thread
    at = thread.index(message) if message in thread else 0
    user = thread[at - 1] if at > 0 else None
    return whole_text(user.content, branch.text) if user is not None else None
