"""A reasoning reply's thinking in the chat document: a header line that toggles it
("▾ Thinking · N tokens · T s"), the thinking tokens in blocks of their own, then the answer.

The thinking is part of the reply's body (``app.views.chat_doc.Body``): its tokens are
offsets from the body's start like the answer's, so clicking, selecting and colouring work
on them as on any token. The header is written before the body's start, so rewriting it
(the count grows as the reply streams) moves no token. Collapsing hides the thinking's
blocks (``QTextBlock.setVisible``): nothing is removed, a copy still sees them. Open while
the thinking is written; closed once the answer starts, unless the header was clicked.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from PySide6.QtGui import QTextCursor, QTextDocument

from app.model.thinking import ThinkingSpan, forced_by_budget, thinking_header
from app.store.compare_runs import StreamKey
from app.views.chat_sections import Block, block, char
from app.views.theme import Colors
from engine.api.events import TokenStep
from engine.api.reasoning import ANSWER, THINKING

THINK_LEFT = 20
"""The thinking's indent, deeper than the answer's (8): it reads as an aside."""


@dataclass(eq=False)
class ThinkingPart:
    """What the document keeps of one reply's thinking."""

    answer: QTextCursor | None = None
    """Where the answer's block starts, once it does (kept there by Qt)."""
    end: int | None = None
    """The first answer token's index."""
    started: float = 0.0
    ended: float | None = None
    timed: bool = False
    """Whether the thinking was seen streaming (a reply read back has no times)."""
    header: str = ""


def header_block(href: str, text: str, colors: Colors) -> Block:
    """The thinking's header line: a link that opens and closes it (drawn for the eye only)."""
    return block(top=4, left=8), [(text, char(colors, href=href, px=12, display_only=True))]


def open_thinking(doc: QTextDocument, anchor: QTextCursor, tail: QTextCursor, href: str, colors: Colors) -> None:
    """Start a thinking at an empty body: its header in the body's block, then a block for
    its tokens, where the body now starts."""
    fmt, spans = header_block(href, "▾ Thinking", colors)
    tail.setBlockFormat(fmt)
    for text, span in spans:
        tail.insertText(text, span)
    tail.insertBlock(block(left=THINK_LEFT), char(colors))
    anchor.setPosition(tail.position())


def start_answer(doc: QTextDocument, tail: QTextCursor, part: ThinkingPart, index: int, colors: Colors) -> None:
    """The first answer token is next: a block of its own after the thinking."""
    tail.insertBlock(block(left=8, top=4), char(colors))
    part.answer = QTextCursor(doc)
    part.answer.setPosition(tail.position())
    part.answer.setKeepPositionOnInsert(True)
    part.end = index
    part.ended = time.monotonic() if part.timed else None


def seconds(part: ThinkingPart) -> float | None:
    if not part.timed:
        return None
    return (part.ended if part.ended is not None else time.monotonic()) - part.started


def header_text(part: ThinkingPart, steps: list[TokenStep], drawn: int, live: bool, note: str, open_: bool) -> str:
    """The header's words for the ``drawn`` steps so far (from what the part knows: no scan
    of the steps at every flush of a long thinking)."""
    end = part.end if part.end is not None else drawn
    span = ThinkingSpan(0, part.end, end, part.end is not None and forced_by_budget(steps[end - 1]))
    finish = note.strip()[1:-1] if note.strip().startswith("[") else None
    return thinking_header(span, live, finish, seconds(part), open_)


def is_open(part: ThinkingPart, chosen: bool | None) -> bool:
    """Open while it is written, closed once the answer started; a click decides after."""
    return chosen if chosen is not None else part.end is None


def set_visible(doc: QTextDocument, anchor: QTextCursor, part: ThinkingPart, tail: QTextCursor, on: bool) -> None:
    """Show or hide the thinking's blocks (from the body's start to the answer's block)."""
    stop = part.answer.position() if part.answer is not None else tail.position() + 1
    first = doc.findBlock(anchor.position())
    blk, changed = first, False
    while blk.isValid() and blk.position() < stop:
        if blk.isVisible() != on:
            blk.setVisible(on)
            changed = True
        blk = blk.next()
    if changed:
        doc.markContentsDirty(first.position(), max(1, stop - first.position()))


class ThinkingBody(Protocol):
    """What the thinking reads and writes of a reply's body (``app.views.chat_doc.Body``)."""

    id: int
    stream: StreamKey
    steps: list[TokenStep]
    anchor: QTextCursor | None
    tail: QTextCursor | None
    offsets: array
    thinking: ThinkingPart | None
    live: bool
    note: str

    @property
    def drawn(self) -> int: ...


class ChatThinking:
    """:class:`app.views.chat_doc.ChatDocument`'s drawing of a reply's thinking, over its
    document: ``colors`` gives the document's colours now, ``replace_block`` replaces a
    block's text and format (the document's own, which keeps its token offsets)."""

    def __init__(
        self, doc: QTextDocument, colors: Callable[[], Colors], replace_block: Callable[[int, Block], None]
    ) -> None:
        self.doc = doc
        self._colors = colors
        self._replace_block = replace_block
        self.opened: dict[StreamKey, bool] = {}
        """A thinking opened or closed by a click on its header (else: open while written)."""

    def phase_blocks(self, body: ThinkingBody, step: TokenStep, index: int) -> bool:
        """Open the thinking before a reply's first thinking token, and the answer's block
        before the first answer token after it; True when the body's start moved."""
        if body.thinking is None:
            if step.phase != THINKING or body.offsets:
                return False
            body.thinking = ThinkingPart(started=time.monotonic(), timed=body.live)
            open_thinking(self.doc, body.anchor, body.tail, f"think:{body.id}", self._colors())
            return True
        if body.thinking.end is None and step.phase == ANSWER:
            start_answer(self.doc, body.tail, body.thinking, index, self._colors())
        return False

    def refresh(self, body: ThinkingBody) -> None:
        """Rewrite the thinking's header where it changed; show or hide its blocks."""
        part = body.thinking
        if part is None:
            return
        open_ = is_open(part, self.opened.get(body.stream))
        text = header_text(part, body.steps, body.drawn, body.live, body.note, open_)
        if text != part.header:
            part.header = text
            header = self.doc.findBlock(body.anchor.position()).previous()
            self._replace_block(header.position(), header_block(f"think:{body.id}", text, self._colors()))
        set_visible(self.doc, body.anchor, part, body.tail, open_)

    def toggle(self, body: ThinkingBody) -> None:
        """The thinking's header was clicked: open it, or close it."""
        if body.thinking is None:
            return
        self.opened[body.stream] = not is_open(body.thinking, self.opened.get(body.stream))
        self.refresh(body)

    def renamed(self, old: StreamKey, new: StreamKey) -> None:
        """A reply was saved as a branch: its thinking stays as it was opened or closed."""
        if old in self.opened:
            self.opened[new] = self.opened.pop(old)

    def header_span(self, body: ThinkingBody) -> tuple[int, int] | None:
        """Where the thinking's header of ``body`` is drawn, if it has a thinking."""
        if body.thinking is None:
            return None
        header = self.doc.findBlock(body.anchor.position()).previous()
        return header.position(), header.length() - 1
