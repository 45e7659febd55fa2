"""Why the selected reply cannot be checked or compared (Check precision…, Compare
models…): both run a saved reply of the loaded local model through the engine again, so
they refuse the same things in the same words. Qt-free."""

from __future__ import annotations

from typing import Any


def branch_of(chat: Any, stream: Any) -> Any:
    """The saved branch a ``("branch", id)`` stream names, or None."""
    message = chat.message_of(stream)
    return next((b for b in message.branches if b.id == stream[1]), None) if message is not None else None


def selected_reply_problem(chat: Any, model_name: str, verb: str, select_hint: str) -> str:
    """The sentence saying why the reply under ``chat``'s selection cannot be ``verb``-ed
    by the model named ``model_name`` ("" when it can); ``select_hint`` when nothing is
    selected."""
    stream = chat.selection[0] if chat.selection else None
    if stream is None:
        return select_hint
    if stream[0] != "branch":
        return f"The reply is still being written: {verb} it once it has ended."
    branch = branch_of(chat, stream)
    if branch is not None and branch.model != model_name:
        return f"The selected reply was written by {branch.model}: load it to {verb} the reply."
    steps = chat.steps_of(stream)
    if not steps:
        return "The selected reply has no tokens."
    if any(s.token_id is None for s in steps):
        return "The selected reply came from a server that did not report its token ids."
    return ""
