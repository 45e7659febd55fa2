"""How File → Open conversation names each conversation, without Qt.

A title is the first message's first line, so two chats that began with the same question
(the first-run question, say) read the same; each item adds when it was last written to, the
model of its latest reply and its length, and the title is cut so the rest stays in view.
"""

from __future__ import annotations

import time

from app.store.rows import ConversationSummary

TITLE_CHARS = 48


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def short_title(title: str) -> str:
    line = title.strip().splitlines()[0] if title.strip() else "(untitled)"
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def conversation_label(summary: ConversationSummary) -> str:
    """``What is the capital of France? — 2025-05-14 10:32 · SmolLM2-135M-Instruct · 2 turns
    · 57 tokens``: the menu item's text."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(summary.updated_at))
    parts = [when, summary.model or "no reply yet", _count(summary.turns, "turn"), _count(summary.tokens, "token")]
    return f"{short_title(summary.title)} — {' · '.join(parts)}"


def conversation_tooltip(summary: ConversationSummary) -> str:
    """The whole title, and what the numbers count."""
    return (
        f"{summary.title}\n{_count(summary.turns, 'message')} sent; {_count(summary.tokens, 'token')} in the replies"
        " shown (each reply's current branch)."
    )
