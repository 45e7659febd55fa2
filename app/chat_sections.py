"""What the chat draws around the tokens: each entry's lines as blocks of formatted spans.

A *block* is ``(QTextBlockFormat, [(text, QTextCharFormat), ...])``. ``app.chat_doc``
writes them; it rewrites an assistant entry's header line, a compare run's column
headings and its trailer in place when they change (a branch count, a finish reason,
"writing…", the Keep links), without touching the tokens. Links are anchors:
``br:<message>:<±1>`` steps branches, ``keep:<message>:<column>`` keeps a column,
``cmp:<message>`` shows a kept compare run's columns again.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QTextBlockFormat, QTextCharFormat

from app.model.entries import ChatEntry, ColumnEntry
from app.theme import Colors, variant_color

Span = tuple[str, QTextCharFormat]
Block = tuple[QTextBlockFormat, list[Span]]


def char(colors: Colors, *, bold=False, italic=False, color: str | None = None, px: int | None = None, href=None):
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(color or colors.foreground))
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    if italic:
        fmt.setFontItalic(True)
    if px is not None:
        fmt.setFontPointSize(px * 0.75)
    if href is not None:
        fmt.setAnchor(True)
        fmt.setAnchorHref(href)
        fmt.setForeground(QColor(colors.final))
    return fmt


def block(*, top: float = 0, left: float = 0, bottom: float = 0) -> QTextBlockFormat:
    fmt = QTextBlockFormat()
    fmt.setTopMargin(top)
    fmt.setLeftMargin(left)
    fmt.setBottomMargin(bottom)
    return fmt


def section_blocks(entry: ChatEntry, colors: Colors) -> list[Block]:
    """Every line of an entry but its tokens (an assistant entry: its header line)."""
    if entry.role == "user":
        return [
            (block(top=12), [("You", char(colors, bold=True))]),
            (block(left=8), [(entry.text, char(colors))]),
        ]
    if entry.role == "welcome":
        lines = entry.text.splitlines()
        blocks: list[Block] = [(block(bottom=6), [("Welcome to Logitscope", char(colors, bold=True, px=17))])]
        blocks += [(block(left=12, bottom=6), [("•  " + line, char(colors))]) for line in lines[:-1]]
        blocks.append((block(top=4), [(lines[-1] if lines else "", char(colors, bold=True, color=colors.final))]))
        return blocks
    if entry.role == "system":
        return [(block(), [(entry.text, char(colors, italic=True, color=colors.raw))])]
    return [header_block(entry, colors)]


def header_block(entry: ChatEntry, colors: Colors) -> Block:
    """An assistant or compare entry's first line."""
    muted = char(colors, color=colors.raw, px=12)
    mid = entry.message_id
    spans: list[Span] = [("Assistant", char(colors, bold=True))]
    if entry.role == "compare":
        spans.append((f"  ·  {len(entry.columns)} settings side by side", muted))
        if entry.prefix_text:
            spans.append(("  ·  from here: ", muted))
            spans.append((entry.prefix_text.replace("\n", " ⏎ "), char(colors, italic=True, color=colors.raw, px=12)))
        return block(top=12), spans
    if entry.branches > 1:
        spans += [
            ("   ", char(colors)),
            ("‹", char(colors, href=f"br:{mid}:-1")),
            (f" {entry.branch + 1}/{entry.branches} ", char(colors)),
            ("›", char(colors, href=f"br:{mid}:1")),
        ]
    if entry.kept:
        spans += [(f"  ·  {entry.kept}  ", muted), ("show all", char(colors, href=f"cmp:{mid}", px=12))]
    if entry.streaming:
        spans.append(("  ·  writing…", muted))
    if entry.note:
        spans.append((f"  {entry.note}", muted))
    return block(top=12), spans


def column_block(entry: ChatEntry, column: int, col: ColumnEntry, colors: Colors) -> Block:
    """A compare column's heading: its colour, label, state and the Keep link."""
    spans: list[Span] = [
        ("● ", char(colors, color=variant_color(column, colors))),
        (col.label, char(colors, bold=True)),
    ]
    muted = char(colors, color=colors.raw, px=12)
    if col.streaming:
        spans.append(("  writing…", muted))
    if col.note:
        spans.append((f"  {col.note}", muted))
    if entry.finished:
        spans += [("   ", muted), ("Keep", char(colors, href=f"keep:{entry.message_id}:{column}", px=12))]
    return block(), spans


def trailer_block(entry: ChatEntry, colors: Colors) -> Block:
    """The line under a compare run's columns."""
    muted = char(colors, color=colors.raw, px=12)
    if entry.finished:
        text = "Keep the column you prefer as the reply: the others stay as its branches (‹ ›)."
    else:
        text = "One prefill, one batch: every column is drawn from the same prompt."
    return block(bottom=4), [(text, muted)]
