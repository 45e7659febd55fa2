"""What the chat draws around the tokens: each entry's lines as blocks of formatted spans.

A *block* is ``(QTextBlockFormat, [(text, QTextCharFormat), ...])``. ``app.views.chat_doc``
writes them; it rewrites an assistant entry's header line, a compare run's column
headings and its trailer in place when they change (a branch count, a finish reason,
"writing…", the Keep links), without touching the tokens. Links are anchors:
``br:<message>:<±1>`` steps branches, ``keep:<message>:<column>`` keeps a column,
``cmp:<message>`` shows a kept compare run's columns again, ``seed:<seed>`` puts a reply's
seed into the sampling panel.

What is drawn only for the eye (a whitespace token's glyph, ``⟨<|im_end|>⟩`` for a token
without text, the links) is marked :data:`DISPLAY_ONLY`, so a copy leaves it out.
"""

from __future__ import annotations

from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QTextBlockFormat,
    QTextCharFormat,
    QTextFormat,
    QTextLength,
    QTextTableFormat,
)

from app.model.draft import outcome_of
from app.model.entries import ChatEntry, ColumnEntry
from app.model.scored import shading_logprob
from app.model.textfmt import prob, visible
from app.views.theme import Colors, probability_color, variant_color
from engine.api.draft import Outcome
from engine.api.events import TokenStep
from engine.api.reasoning import THINKING

NO_BRUSH = QBrush(QColor(0, 0, 0, 0))
DISPLAY_ONLY = int(QTextFormat.Property.UserProperty) + 1
"""A character format property: drawn text that is not the conversation's (left out of copies)."""
THINKING_TEXT = int(QTextFormat.Property.UserProperty) + 2
"""A character format property: a reasoning reply's thinking (a copy marks it as such)."""
SEED_TIP = "Put this seed in the sampling panel: the same seed and settings write this reply again."
Span = tuple[str, QTextCharFormat]
WJ, ZWSP = "\u2060", "\u200b"  # word joiner (no break here), zero-width space (a break may go here)
Block = tuple[QTextBlockFormat, list[Span]]


def char(
    colors: Colors,
    *,
    bold=False,
    italic=False,
    color: str | None = None,
    px: int | None = None,
    href=None,
    display_only=False,
):
    """A span's format; ``display_only``: drawn for the eye, not part of a copy."""
    fmt = QTextCharFormat()
    if display_only:
        fmt.setProperty(DISPLAY_ONLY, True)
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
        # The bullets, then the state line, which may be empty (nothing said yet): split on
        # every newline, or an empty state drew the last bullet as the state.
        lines = entry.text.split("\n")
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
            ("   ", char(colors, display_only=True)),
            ("‹", char(colors, href=f"br:{mid}:-1", display_only=True)),
            (f" {entry.branch + 1}/{entry.branches} ", char(colors, display_only=True)),
            ("›", char(colors, href=f"br:{mid}:1", display_only=True)),
        ]
    if entry.kept:
        spans += [
            (f"  ·  {entry.kept}  ", muted),
            ("show all", char(colors, href=f"cmp:{mid}", px=12, display_only=True)),
        ]
    spans += seed_spans(entry.seed, colors)
    if entry.streaming:
        spans.append(("  ·  writing…", muted))
    if entry.note:
        spans.append((f"  {entry.note}", muted))
    return block(top=12), spans


def seed_spans(seed: int | None, colors: Colors) -> list[Span]:
    """``seed 1234567 · reuse``: the seed a reply was written with, and a link that puts it
    into the sampling panel."""
    if seed is None:
        return []
    link = char(colors, href=f"seed:{seed}", px=12, display_only=True)
    link.setToolTip(SEED_TIP)
    return [
        (f"  ·  seed {seed}", char(colors, color=colors.raw, px=12)),
        (" · ", char(colors, color=colors.raw, px=12, display_only=True)),
        ("reuse", link),
    ]


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
    spans += seed_spans(col.seed, colors)
    if entry.finished:
        keep = char(colors, href=f"keep:{entry.message_id}:{column}", px=12, display_only=True)
        spans += [("   ", char(colors, display_only=True)), ("Keep", keep)]
    return block(), spans


def trailer_block(entry: ChatEntry, colors: Colors) -> Block:
    """The line under a compare run's columns."""
    muted = char(colors, color=colors.raw, px=12)
    if entry.finished:
        text = "Keep the column you prefer as the reply: the others stay as its branches (‹ ›)."
    else:
        text = "One prefill, one batch: every column is drawn from the same prompt."
    return block(bottom=4), [(text, muted)]


def columns_format(n: int) -> QTextTableFormat:
    """A compare run's table: ``n`` equal columns across the chat, no borders."""
    fmt = QTextTableFormat()
    fmt.setBorder(0)
    fmt.setCellPadding(6)
    fmt.setCellSpacing(4)
    fmt.setTopMargin(4)
    fmt.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
    fmt.setColumnWidthConstraints([QTextLength(QTextLength.Type.PercentageLength, 100 / n)] * n)
    return fmt


def column_cell_format(fmt: QTextCharFormat, colors: Colors) -> QTextCharFormat:
    """A column's tokens sit on a faint panel, so the columns read as columns."""
    fmt.setBackground(QBrush(QColor(colors.removed).lighter(60 if colors.dark else 118)))
    return fmt


# Tokens --------------------------------------------------------------------------------------


CONTEXT_HREF = "ctx:"
CONTEXT_TIP = (
    "The text's first token: the context the rest was read from. The model gives it no "
    "probability, so it is not scored (not shaded, not in the perplexity)."
)


def context_format(colors: Colors) -> QTextCharFormat:
    """A scored text's first token, shown as what it is: the context, not scored (muted,
    italic, never shaded; a link only so that hovering it says so)."""
    fmt = char(colors, italic=True, color=colors.muted)
    fmt.setAnchor(True)
    fmt.setAnchorHref(CONTEXT_HREF)
    return fmt


def token_format(
    href: str, step: TokenStep, selected: bool, colored: bool, colors: Colors, by_draft: bool = False
) -> QTextCharFormat:
    """A token is a link (``tok:<body>:<index>``), shaded by probability when ``colored``
    (by its draft model's outcome when ``by_draft``)."""
    fmt = QTextCharFormat()
    fmt.setAnchor(True)
    fmt.setAnchorHref(href)
    fmt.setForeground(QColor(colors.foreground))
    if step.phase == THINKING:  # quieter than the answer; a copy knows it by the property
        fmt.setForeground(QColor(colors.muted))
        fmt.setProperty(THINKING_TEXT, True)
    style_token(fmt, step, selected, colored, colors, by_draft)
    return fmt


def style_token(
    fmt: QTextCharFormat, step: TokenStep, selected: bool, colored: bool, colors: Colors, by_draft: bool = False
) -> None:
    """What selecting or colouring changes: the background and the underline (merged into
    the token's characters, so a whitespace glyph keeps its own colour and size)."""
    if selected:
        fmt.setBackground(QColor(colors.removed))
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
        fmt.setUnderlineColor(QColor(colors.chosen))
    elif by_draft:
        shade = outcome_color(outcome_of(step), colors)
        fmt.setBackground(QColor(shade) if shade else NO_BRUSH)
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.NoUnderline)
    else:
        shade = probability_color(prob(shading_logprob(step)), colors)  # a scored text: by raw
        fmt.setBackground(QColor(shade) if colored else NO_BRUSH)
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.NoUnderline)


def outcome_color(outcome: Outcome | None, colors: Colors) -> str | None:
    """A drafted token's shade by its outcome (None: no draft at that token)."""
    if outcome is None:
        return None
    return {Outcome.ACCEPTED: colors.accepted, Outcome.REJECTED: colors.rejected, Outcome.BONUS: colors.bonus}[outcome]


def special_mark(piece: str) -> str:
    """``⟨<|im_end|>⟩`` for a token without text, in one piece: word joiners between its
    characters (a line broke after "|", leaving ">⟩" on the next), and a zero-width space
    before it, so it moves to the next line whole rather than taking the word before along."""
    return ZWSP + WJ.join("⟨" + (piece.strip() or "·") + "⟩")


def insert_token(cursor, step: TokenStep, fmt: QTextCharFormat, colors: Colors) -> None:
    """Whitespace and empty tokens keep a faint glyph, so they stay visible and clickable;
    a newline token also breaks the line."""
    text = step.text
    if text.strip():
        cursor.insertText(text, fmt)
        return
    glyph_format = QTextCharFormat(fmt)
    glyph_format.setForeground(QColor(colors.raw))
    glyph_format.setFontPointSize(7.5)
    glyph_format.setProperty(DISPLAY_ONLY, True)
    if not text:
        glyph = special_mark(step.piece)
    elif "\n" in text:
        glyph = "⏎" * text.count("\n")
    else:
        glyph = visible(text)
        cursor.insertText(text, fmt)
    cursor.insertText(glyph, glyph_format)
    if "\n" in text:
        cursor.insertText(text.replace("\r\n", "\n"), fmt)  # all of it: spaces by a newline are text too
