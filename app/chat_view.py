"""The conversation, drawn token by token: each token can be hovered and clicked.

Rendered as HTML in a QTextBrowser: every generated token is an anchor
``tok:<entry>:<index>``, so hovering shows its probability and the top
alternatives and clicking selects it in the inspector. Whitespace-only and
newline tokens get a faint glyph so they stay visible and clickable.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QUrl, Signal
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QTextBrowser, QToolTip

from app.conversation import ChatEntry
from app.textfmt import escape, percent, prob, visible
from app.theme import LIGHT, Colors, probability_color
from engine.events import TokenStep


class ChatView(QTextBrowser):
    token_clicked = Signal(int, int)  # entry, token index
    branch_stepped = Signal(int, int)  # entry, +1 / -1

    def __init__(self) -> None:
        super().__init__()
        self.setOpenLinks(False)
        self.setMouseTracking(True)
        self.anchorClicked.connect(self._on_anchor)
        self.colors: Colors = LIGHT
        self.color_tokens = False
        self.entries: list[ChatEntry] = []
        self.selected: tuple[int, int] | None = None

    def show_entries(self, entries: list[ChatEntry], selected: tuple[int, int] | None) -> None:
        self.entries, self.selected = entries, selected
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        position = bar.value()
        self.setHtml(self._html())
        bar.setValue(bar.maximum() if at_end else position)

    def _html(self) -> str:
        c = self.colors
        parts = [
            f"<html><body style='color:{c.foreground}; font-size:14px;'>",
        ]
        for i, entry in enumerate(self.entries):
            parts.append(self._entry_html(i, entry))
        parts.append("</body></html>")
        return "".join(parts)

    def _entry_html(self, i: int, entry: ChatEntry) -> str:
        c = self.colors
        if entry.role == "user":
            body = escape(entry.text).replace("\n", "<br>")
            return f"<p style='margin-top:12px'><b>You</b></p><p style='margin-left:8px'>{body}</p>"
        if entry.role == "welcome":
            lines = "".join(
                f"<li style='margin-bottom:6px'>{escape(line)}</li>" for line in entry.text.splitlines()[:-1]
            )
            state = escape(entry.text.splitlines()[-1])
            return f"<h3>Welcome to Logitscope</h3><ul>{lines}</ul><p style='color:{c.final}'><b>{state}</b></p>"
        if entry.role == "system":
            return f"<p style='color:{c.raw}'><i>{escape(entry.text)}</i></p>"
        header = "<b>Assistant</b>"
        if entry.branches > 1:
            header += (
                f" &nbsp; <a href='br:{i}:-1' style='text-decoration:none'>‹</a>"
                f" {entry.branch + 1}/{entry.branches} "
                f"<a href='br:{i}:1' style='text-decoration:none'>›</a>"
            )
        tokens = "".join(self._token_html(i, j, s) for j, s in enumerate(entry.steps))
        if entry.streaming:
            tokens += f"<span style='color:{c.raw}'> ▍</span>"
        note = f"<p style='color:{c.raw}; font-size:11px'>{escape(entry.note)}</p>" if entry.note else ""
        return f"<p style='margin-top:12px'>{header}</p><p style='margin-left:8px'>{tokens}</p>{note}"

    def _token_html(self, entry: int, index: int, step: TokenStep) -> str:
        c = self.colors
        style = ["text-decoration:none", f"color:{c.foreground}"]
        if self.color_tokens:
            style.append(f"background-color:{probability_color(prob(step.logprob), c)}")
        if self.selected == (entry, index):
            style.append(f"border-bottom:2px solid {c.chosen}; background-color:{c.removed}")
        text = step.text
        if text.strip() == "":
            glyph = visible(text) if text else ("⟨" + escape(step.piece.strip() or "·") + "⟩")
            shown = f"<span style='color:{c.raw}; font-size:10px'>{escape(glyph) if text else glyph}</span>"
            if "\n" in text:
                shown += "<br>" * text.count("\n")
            elif text:
                shown = escape(text).replace(" ", "&nbsp;") + shown
        else:
            shown = escape(text).replace("\n", "<br>").replace("  ", "&nbsp; ")
        return f"<a href='tok:{entry}:{index}' style='{'; '.join(style)}'>{shown}</a>"

    def _on_anchor(self, url: QUrl) -> None:
        kind, entry, value = url.toString().split(":")
        if kind == "tok":
            self.token_clicked.emit(int(entry), int(value))
        elif kind == "br":
            self.branch_stepped.emit(int(entry), int(value))

    def step_at(self, pos: QPoint) -> TokenStep | None:
        anchor = self.anchorAt(pos)
        if not anchor.startswith("tok:"):
            return None
        _, entry, index = anchor.split(":")
        try:
            return self.entries[int(entry)].steps[int(index)]
        except (IndexError, ValueError):
            return None

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        step = self.step_at(event.position().toPoint())
        if step is not None:
            QToolTip.showText(event.globalPosition().toPoint(), tooltip_for(step), self)
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(event)


def tooltip_for(step: TokenStep) -> str:
    lines = [
        f"<b>{escape(visible(step.piece))}</b> — p(final) {percent(step.logprob)}, p(raw) {percent(step.raw_logprob)}"
    ]
    if step.forced:
        lines.append("<i>picked by hand</i>")
    others = [cand for cand in step.top if cand.token_id != step.token_id][:5]
    for cand in others:
        lines.append(f"&nbsp;&nbsp;{escape(visible(cand.text))} &nbsp; {percent(cand.logprob)}")
    return "<br>".join(lines)


def color_legend(colors: Colors) -> str:
    stops = [0.0, 0.25, 0.5, 0.75, 1.0]
    cells = "".join(
        f"<span style='background-color:{probability_color(p, colors)}'>&nbsp;{int(p * 100)}%&nbsp;</span>"
        for p in stops
    )
    return f"p(final) of the chosen token: {cells}"
