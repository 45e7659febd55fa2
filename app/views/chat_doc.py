"""The chat as a QTextDocument that is appended to, never re-rendered while a reply streams.

Each entry of the model (``app.model.entries``) is a *section* of the document; each token
stream an entry draws is a *body*: a plain paragraph run for a reply, or a cell of a
one-row table for each column of a compare run. Positions are kept as Qt keeps them:
a section's start and a body's start are ``QTextCursor`` objects, which the document moves
when text is inserted or removed before them, and each token is recorded as an offset from
its body's start (tokens are only ever appended at a body's end, so offsets never change).

- New tokens are inserted at the end of their body: the cost is that of the new tokens.
- Selecting or re-colouring a token re-formats its characters only.
- A change of the entries is compared with what is drawn: an entry whose header changed
  has its header lines rewritten, one whose tokens only grew is appended to, and only from
  the first entry that differs otherwise are sections removed and drawn again.

Every token is an anchor ``tok:<body>:<index>`` (body ids are this document's own), so the
view finds the stream and index of a clicked or hovered token.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from PySide6.QtGui import (
    QFont,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextTable,
)

from app.model.entries import ChatEntry
from app.store.compare_runs import StreamKey, TokenRef
from app.views.chat_sections import (
    Block,
    block,
    char,
    column_block,
    column_cell_format,
    columns_format,
    context_format,
    header_block,
    insert_token,
    section_blocks,
    style_token,
    token_format,
    trailer_block,
)
from app.views.chat_thinking import ChatThinking, ThinkingPart
from app.views.theme import LIGHT, Colors
from engine.api.events import TokenStep

FONT_PX = 14
Move = QTextCursor.MoveOperation
Keep = QTextCursor.MoveMode.KeepAnchor


@dataclass(eq=False)
class Body:
    """One token stream drawn in the document, from index ``start`` on."""

    id: int
    stream: StreamKey
    steps: list[TokenStep]
    start: int
    anchor: QTextCursor | None = None  # a reply's body: where it starts (kept there by Qt)
    tail: QTextCursor | None = None  # ... and where the next token goes
    table: QTextTable | None = None  # a compare column: the table and its column
    column: int = 0
    offsets: array = field(default_factory=lambda: array("l"))
    lengths: array = field(default_factory=lambda: array("l"))
    thinking: ThinkingPart | None = None  # a reasoning reply's thinking (app.views.chat_thinking)
    live: bool = False  # the reply is being written
    note: str = ""  # its finish note ("[length]"), which the thinking's header reads

    @property
    def drawn(self) -> int:
        """Steps drawn so far (``start`` + tokens inserted)."""
        return self.start + len(self.offsets)

    def base(self) -> int:
        if self.table is not None:
            return self.table.cellAt(1, self.column).firstPosition()
        return self.anchor.position()

    def cursor(self) -> QTextCursor:
        if self.table is not None:
            return self.table.cellAt(1, self.column).lastCursorPosition()
        return self.tail


@dataclass(eq=False)
class Section:
    entry: ChatEntry
    header: tuple
    start: QTextCursor
    bodies: list[Body] = field(default_factory=list)
    table: QTextTable | None = None


class ChatDocument:
    def __init__(self, document: QTextDocument) -> None:
        self.doc = document
        self.doc.setUndoRedoEnabled(False)  # a read-only chat: an undo stack would only grow
        font = QFont(self.doc.defaultFont())
        font.setPixelSize(FONT_PX)
        self.doc.setDefaultFont(font)
        self.colors: Colors = LIGHT
        self.color_tokens = False
        self.color_draft = False  # by a draft model's outcome instead of by probability
        self.selected: TokenRef | None = None
        self.sections: list[Section] = []
        self.bodies: dict[int, Body] = {}
        self._by_stream: dict[StreamKey, list[Body]] = {}
        self._next_body = 1
        self.thinking = ChatThinking(self.doc, lambda: self.colors, self._replace_block)
        """A reasoning reply's thinking: its header, its blocks, opened or closed."""
        # Counters, for tests and the benchmark: what the document had to do.
        self.tokens_drawn = 0
        self.sections_drawn = 0
        self.headers_rewritten = 0
        self.tokens_restyled = 0

    # Entries ------------------------------------------------------------------------------

    def sync(self, entries: list[ChatEntry]) -> None:
        """Bring the document up to ``entries``, redrawing as little as possible."""
        keep = 0
        while keep < min(len(self.sections), len(entries)) and self._compatible(self.sections[keep], entries[keep]):
            keep += 1
        cursor = QTextCursor(self.doc)
        cursor.beginEditBlock()
        try:
            for section, entry in zip(self.sections[:keep], entries[:keep], strict=True):
                self._update(section, entry)
            self._truncate(keep)
            for entry in entries[keep:]:
                self._append_section(entry)
        finally:
            cursor.endEditBlock()

    def redraw(self, entries: list[ChatEntry]) -> None:
        """Draw everything again (a new theme)."""
        self._truncate(0)
        self.sync(entries)

    def _compatible(self, section: Section, entry: ChatEntry) -> bool:
        old = section.entry
        if old.key != entry.key or old.role != entry.role or old.context != entry.context:
            return False
        if old.role not in ("assistant", "compare"):
            return section.header == entry.header()
        bodies = entry.bodies()
        if len(bodies) != len(section.bodies):
            return False
        for body, (_, steps, start) in zip(section.bodies, bodies, strict=True):
            if body.start != start or len(steps) < body.drawn:
                return False
            if body.drawn > start and steps[body.drawn - 1] is not body.steps[body.drawn - 1]:
                return False
        return True

    def _update(self, section: Section, entry: ChatEntry) -> None:
        """Same tokens so far: rename the streams, append what is new, rewrite the header."""
        for body, (stream, steps, _) in zip(section.bodies, entry.bodies(), strict=True):
            if body.stream != stream:
                self.rename(body.stream, stream)
            body.steps = steps
            body.live, body.note = entry.streaming, entry.note
            self._append_body(body)
            self.thinking.refresh(body)
        section.entry = entry
        if section.header != entry.header():
            section.header = entry.header()
            self._rewrite_header(section)

    def _truncate(self, keep: int) -> None:
        if keep >= len(self.sections):
            return
        start = self.sections[keep].start.position()
        cursor = QTextCursor(self.doc)
        cursor.setPosition(max(0, start - 1) if keep else 0)
        cursor.movePosition(Move.End, Keep)
        cursor.removeSelectedText()
        if keep == 0:
            cursor.setBlockFormat(QTextBlockFormat())
            cursor.setCharFormat(QTextCharFormat())
        for section in self.sections[keep:]:
            for body in section.bodies:
                self.bodies.pop(body.id, None)
                bodies = self._by_stream.get(body.stream, [])
                if body in bodies:
                    bodies.remove(body)
        del self.sections[keep:]

    def _append_section(self, entry: ChatEntry) -> None:
        cursor = QTextCursor(self.doc)
        cursor.movePosition(Move.End)
        if self.sections:
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        start = QTextCursor(self.doc)
        start.setPosition(cursor.position())
        start.setKeepPositionOnInsert(True)
        section = Section(entry, entry.header(), start)
        self.sections.append(section)
        self.sections_drawn += 1
        self._write_header(cursor, section)
        if entry.role == "assistant" and entry.stream is not None:
            cursor.insertBlock(block(left=8), QTextCharFormat())
            cursor.insertText(entry.context, context_format(self.colors))  # a scored text's context
            anchor = QTextCursor(self.doc)
            anchor.setPosition(cursor.position())
            anchor.setKeepPositionOnInsert(True)
            tail = QTextCursor(self.doc)
            tail.setPosition(cursor.position())
            body = self._new_body(entry.stream, entry.steps, 0)
            body.anchor, body.tail = anchor, tail
            body.live, body.note = entry.streaming, entry.note
            section.bodies.append(body)
            if not entry.steps and entry.text and not entry.streaming:
                # Saved without its steps (the app stopped before they were written): the text.
                cursor.insertText(entry.text, char(self.colors))
            self._append_body(body)
        elif entry.role == "compare":
            self._append_table(cursor, section)

    def _append_table(self, cursor: QTextCursor, section: Section) -> None:
        entry = section.entry
        # After the header line; a block follows the table (the trailer).
        table = cursor.insertTable(2, len(entry.columns), columns_format(len(entry.columns)))
        section.table = table
        for column, col in enumerate(entry.columns):
            cell = table.cellAt(1, column)
            cell.setFormat(column_cell_format(cell.format(), self.colors))
            body = self._new_body(col.stream, col.steps, col.start)
            body.table, body.column = table, column
            section.bodies.append(body)
        self._write_column_headers(section)
        self._write_trailer(section)
        for body in section.bodies:
            self._append_body(body)

    # Headers -------------------------------------------------------------------------------

    @staticmethod
    def _write_blocks(cursor: QTextCursor, blocks: list[Block], first_in_place: bool = True) -> None:
        """Write ``blocks`` at the cursor; the first one into the cursor's own block."""
        for i, (block_format, spans) in enumerate(blocks):
            if i == 0 and first_in_place:
                cursor.setBlockFormat(block_format)
            else:
                cursor.insertBlock(block_format, QTextCharFormat())
            for text, fmt in spans:
                cursor.insertText(text, fmt)

    def _write_header(self, cursor: QTextCursor, section: Section) -> None:
        self._write_blocks(cursor, section_blocks(section.entry, self.colors))

    def _replace_block(self, position: int, new: Block) -> None:
        """Replace the text of the block at ``position`` (its format too)."""
        found = self.doc.findBlock(position)
        cursor = QTextCursor(self.doc)
        cursor.setPosition(found.position())
        cursor.setPosition(found.position() + found.length() - 1, Keep)
        cursor.removeSelectedText()
        self._write_blocks(cursor, [new])

    def _rewrite_header(self, section: Section) -> None:
        """Replace the header line (and a compare run's column headings and trailer)."""
        self.headers_rewritten += 1
        self._replace_block(section.start.position(), header_block(section.entry, self.colors))
        if section.table is not None:
            self._write_column_headers(section)
            self._write_trailer(section)

    def _write_column_headers(self, section: Section) -> None:
        for column, col in enumerate(section.entry.columns):
            cell = section.table.cellAt(0, column)
            cursor = cell.firstCursorPosition()
            cursor.setPosition(cell.lastPosition(), Keep)
            cursor.removeSelectedText()
            self._write_blocks(cursor, [column_block(section.entry, column, col, self.colors)])

    def _write_trailer(self, section: Section) -> None:
        self._replace_block(section.table.lastPosition() + 1, trailer_block(section.entry, self.colors))

    # Tokens --------------------------------------------------------------------------------

    def _new_body(self, stream: StreamKey, steps: list[TokenStep], start: int) -> Body:
        body = Body(self._next_body, stream, steps, start)
        self._next_body += 1
        self.bodies[body.id] = body
        self._by_stream.setdefault(stream, []).append(body)
        return body

    def append(self, stream: StreamKey) -> int:
        """Draw the steps of ``stream`` not drawn yet; returns how many were."""
        return sum(self._append_body(body) for body in self._by_stream.get(stream, []))

    def _append_body(self, body: Body) -> int:
        new = len(body.steps) - body.drawn
        if new <= 0:
            return 0
        cursor = body.cursor()
        base = body.base()
        for index in range(body.drawn, len(body.steps)):
            if body.table is None and self.thinking.phase_blocks(body, body.steps[index], index):
                base = body.base()
            position = cursor.position()
            selected = (body.stream, index) == self.selected
            fmt = token_format(
                f"tok:{body.id}:{index}", body.steps[index], selected, self.color_tokens, self.colors, self.color_draft
            )
            insert_token(cursor, body.steps[index], fmt, self.colors)
            body.offsets.append(position - base)
            body.lengths.append(cursor.position() - position)
        self.tokens_drawn += new
        self.thinking.refresh(body)
        return new

    def restyle(self, ref: TokenRef | None) -> None:
        """Re-format one token (its selection or colour changed)."""
        if ref is None:
            return
        for body in self._by_stream.get(ref[0], []):
            i = ref[1] - body.start
            if 0 <= i < len(body.offsets):
                position = body.base() + body.offsets[i]
                cursor = QTextCursor(self.doc)
                cursor.setPosition(position)
                cursor.setPosition(position + body.lengths[i], Keep)
                fmt = QTextCharFormat()
                step = body.steps[ref[1]]
                style_token(fmt, step, ref == self.selected, self.color_tokens, self.colors, self.color_draft)
                cursor.mergeCharFormat(fmt)
                self.tokens_restyled += 1

    def set_selected(self, ref: TokenRef | None) -> None:
        if ref == self.selected:
            return
        old, self.selected = self.selected, ref
        self.restyle(old)
        self.restyle(ref)

    def set_color_tokens(self, on: bool, by_draft: bool = False) -> None:
        """Colour every drawn token by probability, or by its draft model's outcome
        (``by_draft``), or clear it: formats only."""
        if (on, by_draft) == (self.color_tokens, self.color_draft):
            return
        self.color_tokens, self.color_draft = on, by_draft
        cursor = QTextCursor(self.doc)
        cursor.beginEditBlock()
        for body in list(self.bodies.values()):
            base = body.base()
            for i, (offset, length) in enumerate(zip(body.offsets, body.lengths, strict=True)):
                cursor.setPosition(base + offset)
                cursor.setPosition(base + offset + length, Keep)
                fmt = QTextCharFormat()
                selected = (body.stream, body.start + i) == self.selected
                style_token(fmt, body.steps[body.start + i], selected, on, self.colors, by_draft)
                cursor.mergeCharFormat(fmt)
        cursor.endEditBlock()

    def toggle_thinking(self, body_id: int) -> None:
        """The thinking's header was clicked: open it, or close it."""
        body = self.bodies.get(body_id)
        if body is not None:
            self.thinking.toggle(body)

    def thinking_header_span(self, stream: StreamKey) -> tuple[int, int] | None:
        """Where the thinking's header of ``stream`` is drawn (tests, screenshots)."""
        spans = (self.thinking.header_span(body) for body in self._by_stream.get(stream, []))
        return next((span for span in spans if span is not None), None)

    def rename(self, old: StreamKey, new: StreamKey) -> None:
        bodies = self._by_stream.pop(old, [])
        self.thinking.renamed(old, new)
        for body in bodies:
            body.stream = new
        self._by_stream.setdefault(new, []).extend(bodies)
        if self.selected is not None and self.selected[0] == old:
            self.selected = (new, self.selected[1])

    # Lookups -------------------------------------------------------------------------------

    def ref_of(self, href: str) -> TokenRef | None:
        """The token an anchor names, or None."""
        parts = href.split(":")
        if len(parts) != 3 or parts[0] != "tok":
            return None
        body = self.bodies.get(int(parts[1]))
        return (body.stream, int(parts[2])) if body is not None else None

    def span_of(self, ref: TokenRef) -> tuple[int, int] | None:
        """Where token ``ref`` is drawn: (position, length) in the document."""
        for body in self._by_stream.get(ref[0], []):
            i = ref[1] - body.start
            if 0 <= i < len(body.offsets):
                return body.base() + body.offsets[i], body.lengths[i]
        return None
