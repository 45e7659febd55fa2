"""The conversation, drawn token by token: each token can be hovered, clicked and right-clicked.

A ``QTextBrowser`` over :class:`app.views.chat_doc.ChatDocument`, bound to the model's events:
the entries are synced when they change; new tokens are appended and the selection
re-styled at most ~30 times a second (:mod:`app.views.throttle`), never by
re-rendering the conversation. Links: a token selects it; ‹ › steps branches; *Keep*
makes a compare column the reply; *reuse* puts a reply's seed into the sampling panel;
right-click a token for the app's menu: copy it, the selection or the reply's text,
inspect it, branch from it with another candidate, compare settings from it. A copy is the plain text of the
selection, without what is drawn only for the eye (:data:`app.views.chat_sections.DISPLAY_ONLY`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtCore import QMimeData, QPoint, Qt, QUrl, Signal
from PySide6.QtGui import QContextMenuEvent, QMouseEvent, QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication, QMenu, QTextBrowser, QToolTip

from app.model.chat import ChatModel
from app.model.draft import OUTCOME_SHORT, shows_drafts
from app.model.remote_labels import is_chosen, p_label
from app.model.scored import is_scored, shown_kinds
from app.model.structured import record_words, wanted_text
from app.model.textfmt import escape, percent, prob, visible
from app.model.thinking import forced_by_budget, mark_thinking, phase_title, phase_word
from app.store.compare_runs import StreamKey, TokenRef
from app.views.chat_doc import ChatDocument
from app.views.chat_sections import CONTEXT_HREF, CONTEXT_TIP, DISPLAY_ONLY, SEED_TIP, THINKING_TEXT
from app.views.theme import LIGHT, Colors, probability_color
from app.views.throttle import RedrawClock, Throttler, own_clock
from engine.api.events import TokenStep
from engine.api.reasoning import THINKING

BRANCH_CHOICES = 5
"""Candidates offered by "Branch from here with", the most likely first."""


class ChatView(QTextBrowser):
    token_clicked = Signal(object)  # TokenRef
    branch_stepped = Signal(int, int)  # message id, +1 / -1
    keep_requested = Signal(int, int)  # message id, column
    compare_shown = Signal(int)  # message id
    compare_requested = Signal(object)  # TokenRef: compare settings from this token
    seed_reused = Signal(int)  # a reply's seed, for the sampling panel's Seed field
    kinds_changed = Signal(bool, bool)  # whether scored tokens, drawn tokens are shown: the legend follows
    drafts_changed = Signal(bool)  # whether a reply written with a draft model is shown
    branch_requested = Signal(object, object)  # TokenRef, Candidate: continue from it instead

    def __init__(self) -> None:
        super().__init__()
        self.setOpenLinks(False)
        # Links by mouse only: with keyboard access Tab walks every token's link, hundreds of
        # stops before the focus could leave the chat.
        flags = Qt.TextInteractionFlag
        self.setTextInteractionFlags(flags.TextSelectableByMouse | flags.LinksAccessibleByMouse)
        self.setMouseTracking(True)
        self.anchorClicked.connect(self._on_anchor)
        self.writer = ChatDocument(self.document())
        self.model: ChatModel | None = None
        self.compare_label = "Compare settings from this token"
        self._dirty: set[StreamKey] = set()
        self.flushes: Throttler | None = None
        self.kinds = (False, True)  # (scored, drawn) tokens shown (``app.model.scored.shown_kinds``)
        self.drafted = False  # whether a reply shown was written with a draft model
        self.menu: QMenu | None = None  # the last context menu shown

    @property
    def colors(self) -> Colors:
        return self.writer.colors

    def bind(self, model: ChatModel, clock: RedrawClock | None = None) -> None:
        self.model = model
        self.flushes = own_clock(self, clock).throttler(self._flush)
        model.events.entries_changed.connect(self._on_entries_changed)
        model.events.tokens_added.connect(self._on_tokens_added)
        model.events.stream_renamed.connect(self._on_stream_renamed)
        model.events.selection_changed.connect(self._on_selection_changed)
        self._on_entries_changed()

    # Model events --------------------------------------------------------------------------

    def _on_entries_changed(self) -> None:
        with self._keep_scroll():
            self.writer.sync(self.model.entries)
            self.writer.set_selected(self.model.selection)
        self._check_kinds()

    def _check_kinds(self) -> None:
        """Which kinds of token the chat shows (scored, drawn): the legend names each one's
        distribution. Checked as tokens stream too: a scored text starts without any."""
        scored, drawn = shown_kinds(self.model.entries)
        kinds = (scored, drawn or not scored)  # an empty chat's legend: the drawn tokens'
        if kinds != self.kinds:
            self.kinds = kinds
            self.kinds_changed.emit(*kinds)
        drafted = shows_drafts(self.model.entries)
        if drafted != self.drafted:
            self.drafted = drafted
            self.drafts_changed.emit(drafted)

    def _on_tokens_added(self, stream: StreamKey) -> None:
        self._dirty.add(stream)
        self.flushes.request()

    def _on_stream_renamed(self, old: StreamKey, new: StreamKey) -> None:
        self._flush()
        self.writer.rename(old, new)

    def _on_selection_changed(self, _ref: TokenRef | None) -> None:
        # A token picked by hand is shown at once; one followed as a reply streams, on the clock.
        self.flushes.request(urgent=not self.model.follow_latest)

    def _flush(self) -> None:
        if self.model is None:
            return
        with self._keep_scroll():
            dirty, self._dirty = self._dirty, set()
            # Select first: a new token that is the selection is drawn selected.
            self.writer.set_selected(self.model.selection)
            for stream in dirty:
                self.writer.append(stream)
        if dirty:
            self._check_kinds()

    @contextmanager
    def _keep_scroll(self) -> Iterator[None]:
        """A view scrolled to the end stays at the end as the document grows."""
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        yield
        if at_end:
            bar.setValue(bar.maximum())

    # Drawing options -----------------------------------------------------------------------

    def set_colors(self, colors: Colors) -> None:
        self.writer.colors = colors
        if self.model is not None:
            self.writer.redraw(self.model.entries)

    def set_color_tokens(self, on: bool, by_draft: bool = False) -> None:
        self.writer.set_color_tokens(on, by_draft)

    # Mouse ---------------------------------------------------------------------------------

    def _on_anchor(self, url: QUrl) -> None:
        href = url.toString()
        kind, _, rest = href.partition(":")
        if kind == "tok":
            ref = self.writer.ref_of(href)
            if ref is not None:
                self.token_clicked.emit(ref)
            return
        if href == CONTEXT_HREF:  # a scored text's context token: nothing to select
            return
        values = [int(v) for v in rest.split(":")]
        if kind == "think":
            self.writer.toggle_thinking(*values)
        elif kind == "seed":
            self.seed_reused.emit(*values)
        elif kind == "br":
            self.branch_stepped.emit(*values)
        elif kind == "keep":
            self.keep_requested.emit(*values)
        elif kind == "cmp":
            self.compare_shown.emit(*values)

    def ref_at(self, pos: QPoint) -> TokenRef | None:
        return self.writer.ref_of(self.anchorAt(pos))

    def step_at(self, pos: QPoint) -> TokenStep | None:
        ref = self.ref_at(pos)
        steps = self.model.steps_of(ref[0]) if ref is not None and self.model is not None else None
        return steps[ref[1]] if steps is not None and ref[1] < len(steps) else None

    def point_of(self, ref: TokenRef) -> QPoint | None:
        """The middle of token ``ref`` in viewport coordinates (tests, screenshots)."""
        span = self.writer.span_of(ref)
        if span is None:
            return None
        from PySide6.QtGui import QTextCursor

        cursor = QTextCursor(self.document())
        cursor.setPosition(span[0])
        start = self.cursorRect(cursor)
        cursor.setPosition(span[0] + max(1, span[1] - 1))
        end = self.cursorRect(cursor)
        x = (start.center().x() + end.center().x()) // 2 if end.y() == start.y() else start.center().x() + 3
        return QPoint(x, start.center().y())

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        step = self.step_at(event.position().toPoint())
        if step is not None:
            QToolTip.showText(event.globalPosition().toPoint(), tooltip_for(step), self)
        elif self.anchorAt(event.position().toPoint()).startswith("seed:"):
            QToolTip.showText(event.globalPosition().toPoint(), SEED_TIP, self)
        elif self.anchorAt(event.position().toPoint()) == CONTEXT_HREF:
            QToolTip.showText(event.globalPosition().toPoint(), CONTEXT_TIP, self)
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(event)

    def createMimeDataFromSelection(self) -> QMimeData:  # noqa: N802 - Qt's name
        """Ctrl+C, Copy and drags: the selection's plain text only. Rich text would carry
        the tokens' ``tok:`` links and shading into the document it is pasted in."""
        # Qt's own object, not a QMimeData made in Python: the clipboard keeps the last one
        # in a static that is deleted at process exit, after Python, and a Python-made one
        # calls back into Python from its destructor (a segfault at exit). Qt's fills its
        # formats from the selection once, on the first read (``text()`` here); cleared
        # after that, it holds only what is set.
        mime = super().createMimeDataFromSelection()
        mime.text()
        mime.clear()
        mime.setText(plain_text(self.textCursor()))
        return mime

    def token_menu(self, ref: TokenRef) -> QMenu:
        """The context menu of a token, the app's own (a token is a link, and Qt's menu
        offered "Copy Link Location"): copy the token, the selection or the reply's text;
        inspect it; branch from it with another candidate; compare settings from it."""
        menu = QMenu(self)
        steps = (self.model.steps_of(ref[0]) if self.model is not None else None) or []
        step = steps[ref[1]] if ref[1] < len(steps) else None
        if step is not None:
            token = step.text or step.piece  # a token without text (<|im_end|>): its piece
            phase = f" ({phase_word(step)})" if step.phase == THINKING else ""
            copy = menu.addAction(f"Copy token “{visible(token)[:24]}”{phase}")
            copy.triggered.connect(lambda: QApplication.clipboard().setText(token))
        if self.textCursor().hasSelection():
            selection = menu.addAction("Copy selection")
            selection.triggered.connect(lambda: QApplication.clipboard().setText(plain_text(self.textCursor())))
        reply = mark_thinking([(s.text, s.phase == THINKING) for s in steps])  # thinking as <think>…</think>
        copy_reply = menu.addAction("Copy reply text")
        copy_reply.setEnabled(bool(reply))
        copy_reply.triggered.connect(lambda: QApplication.clipboard().setText(reply))
        menu.addSeparator()
        inspect = menu.addAction("Inspect this token")
        inspect.triggered.connect(lambda: self.token_clicked.emit(ref))
        self._branch_menu(menu, ref, step)
        compare = menu.addAction(self.compare_label)
        compare.setToolTip("Each setting redraws this token and continues from it (one prefill).")
        compare.triggered.connect(lambda: self.compare_requested.emit(ref))
        return menu

    def _branch_menu(self, menu: QMenu, ref: TokenRef, step: TokenStep | None) -> None:
        """Branch from here: continue the reply from this token with another candidate
        (the most likely after the last stage first); the reply is kept as a branch."""
        branch = menu.addMenu("Branch from here with")
        others = [c for c in step.top if not is_chosen(step, c)] if step is not None else []
        others.sort(key=lambda c: -prob(c.logprob))
        for cand in others[:BRANCH_CHOICES]:
            action = branch.addAction(f"“{visible(cand.text)}”  {percent(cand.logprob)}")
            action.triggered.connect(lambda _=False, c=cand: self.branch_requested.emit(ref, c))
        branch.setEnabled(bool(others))

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 - Qt's name
        ref = self.ref_at(event.pos())
        if ref is None:
            super().contextMenuEvent(event)
            return
        self.menu = self.token_menu(ref)  # kept: tests and screenshots read the menu shown
        self.menu.exec(event.globalPos())


def plain_text(cursor: QTextCursor) -> str:
    """The text selected by ``cursor`` as the conversation has it: glyphs and links drawn
    only for the eye left out. A token without text (``⟨<|im_end|>⟩``) is left out too: the
    reply's text, saved and sent back to the model, does not hold it either. A reasoning
    reply's thinking is marked ``<think>…</think>`` (:func:`app.model.thinking.mark_thinking`)."""
    doc = QTextDocument()
    QTextCursor(doc).insertFragment(cursor.selection())
    pieces: list[tuple[str, bool]] = []
    block = doc.begin()
    while block.isValid():
        if block != doc.begin():  # the line break belongs with the text before it
            pieces.append(("\n", bool(pieces) and pieces[-1][1]))
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if not fmt.boolProperty(DISPLAY_ONLY):
                text = it.fragment().text().replace("\u2028", "\n").replace("\xa0", " ")
                pieces.append((text, fmt.boolProperty(THINKING_TEXT)))
            it += 1
        block = block.next()
    return mark_thinking(pieces)


def tooltip_for(step: TokenStep) -> str:
    head = f"<b>{escape(visible(step.piece))}</b> — {p_label(step)} {percent(step.logprob)}"
    if step.reported_stage is None:  # a server's one stage is not raw: no second number
        head += f", {p_label(step, final=False)} {percent(step.raw_logprob)}"
    lines = [head]
    if step.phase is not None:
        lines.append(f"<i>{phase_title(step)}</i>")  # thinking / answer, the budget's forced end
    if is_scored(step):  # forced too, but given by the text: nobody picked it
        lines.append(f"<i>scored text: given, not drawn (rank {step.rank} under raw)</i>")
    elif step.forced and not forced_by_budget(step):
        lines.append("<i>picked by hand</i>")
    if step.draft is not None:
        lines.append(f"<i>draft: {escape(OUTCOME_SHORT[step.draft.outcome])}</i>")
    if step.grammar is not None:
        lines.append(f"<i>{escape(record_words(step.grammar, wanted_text(step)))}</i>")
    others = [cand for cand in step.top if not is_chosen(step, cand)][:5]
    for cand in others:
        lines.append(f"&nbsp;&nbsp;{escape(visible(cand.text))} &nbsp; {percent(cand.logprob)}")
    return "<br>".join(lines)


def color_legend(colors: Colors) -> str:
    """The colour cells of the legend, 0 % to 100 % (its words are the chat panel's)."""
    stops = [0.0, 0.25, 0.5, 0.75, 1.0]
    return "".join(
        f"<span style='background-color:{probability_color(p, colors)}'>&nbsp;{int(p * 100)}%&nbsp;</span>"
        for p in stops
    )


SCORED_TIP = (
    "A scored text is shaded by each token's probability under the raw model distribution, "
    "the one its perplexity and surprisal come from; after the chain, XTC or a truncation "
    "would read a likely token as 0."
)
DRAWN_TIP = "A drawn token is shaded by its probability after the last stage: the distribution it was drawn from."


def legend_tooltip(scored: bool, drawn: bool) -> str:
    return "\n".join(([SCORED_TIP] if scored else []) + ([DRAWN_TIP] if drawn else []))


__all__ = ["LIGHT", "ChatView", "color_legend", "legend_tooltip", "tooltip_for"]
