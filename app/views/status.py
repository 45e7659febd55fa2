"""The status bar's permanent widgets: the model, the reply's speed, memory, progress.

The speed is the reply being written's own while it streams (``generating 12.3 tok/s``,
from its tokens' arrival, nothing until its second token), then the engine's figures for
the reply that ended; a scored text has its own figures beside it (the perplexity), so it
leaves the speed empty rather than "generation 0.0 tok/s". Figures of a conversation or a
model no longer shown go.

The model's label gives way first in a narrow window, shortest last: a server's keeps
``server reports: <stage>`` whole (``app.model.remote_labels.label_forms``), the rest of it
in its tooltip; a local model's keeps its name whole, its precision going first (it read
"SmolLM…loat32"). A message is drawn in the room left of the permanent widgets, elided with
"…" and a gap before them (Qt's own cut it mid-word against the model's name,
"…2 forcSmolLM2-135M…"); its whole text is the bar's ``currentMessage()`` and its tooltip.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, QRect, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QProgressBar, QSizeGrip, QStatusBar, QStyle, QStyleOption, QWidget

from app.model.remote_labels import label_forms
from app.model.structured import finished_words
from app.views.fitting import FittedLabel
from engine.api.events import Finished, FinishReason

if TYPE_CHECKING:
    from app.model.chat import ChatModel
    from app.store.compare_runs import StreamKey

STOPPING = "Stopping…"
RATE_AFTER_S = 0.25
MESSAGE_GAP = 12
"""Pixels between the end of a message and the first permanent widget."""
MESSAGE_ROOM = 200
"""The least width a message keeps: the fields give way (to their shorter forms) first."""


def model_forms(name: str) -> list[str]:
    """The model label's forms, longest first: a server's as ``label_forms`` gives them; a
    local ``<name> · <precision>`` keeps the name whole and drops the precision first."""
    forms = label_forms(name)
    if len(forms) == 1 and " · " in name:
        forms.append(name.rsplit(" · ", 1)[0])
    return forms


def message_rect(bar: QStatusBar) -> QRect:
    """Where the bar's message may go: from its left edge to a gap before the leftmost
    visible permanent widget (a message hides the others)."""
    right = bar.width() - MESSAGE_GAP
    for child in bar.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly):
        if child.objectName() == "message_room":
            continue  # the message's own room
        if child.isVisible() and not isinstance(child, QSizeGrip) and not child.isWindow():
            right = min(right, child.x() - MESSAGE_GAP)
    left = 6
    return QRect(left, 0, max(0, right - left), bar.height())


class MessagePainter(QObject):
    """Draws the status bar's message elided to the room it has (QStatusBar's own paint,
    the panel and the item frames, with the message elided)."""

    def __init__(self, bar: QStatusBar) -> None:
        super().__init__(bar)
        self.bar = bar
        bar.installEventFilter(self)
        bar.messageChanged.connect(self._on_message)

    def _on_message(self, text: str) -> None:
        rect = message_rect(self.bar)
        fits = self.bar.fontMetrics().horizontalAdvance(text) <= rect.width()
        self.bar.setToolTip("" if fits else text)

    def shown_message(self) -> str:
        """The message as drawn: elided where it does not fit."""
        rect = message_rect(self.bar)
        return self.bar.fontMetrics().elidedText(self.bar.currentMessage(), Qt.TextElideMode.ElideRight, rect.width())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is not self.bar or event.type() != QEvent.Type.Paint or not self.bar.currentMessage():
            return False
        bar = self.bar
        painter = QPainter(bar)
        option = QStyleOption()
        option.initFrom(bar)
        bar.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, option, painter, bar)
        for child in bar.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly):
            if child.isVisible() and not isinstance(child, QSizeGrip) and child.objectName() != "message_room":
                frame = QStyleOption()
                frame.rect = child.geometry().adjusted(-2, -1, 2, 1)
                frame.palette = bar.palette()
                bar.style().drawPrimitive(QStyle.PrimitiveElement.PE_FrameStatusBarItem, frame, painter, child)
        painter.setPen(bar.palette().windowText().color())
        flags = int(Qt.AlignmentFlag.AlignLeading | Qt.AlignmentFlag.AlignVCenter) | int(Qt.TextFlag.TextSingleLine)
        painter.drawText(message_rect(bar), flags, self.shown_message())
        painter.end()
        return True


class StatusWidgets:
    def __init__(self, bar: QStatusBar) -> None:
        self.bar = bar
        self.model: ChatModel | None = None
        self._first: dict[StreamKey, tuple[float, int]] = {}  # stream -> (time, tokens) at its first new token
        self._prefilling: int | None = None  # the request whose prefill the progress bar shows
        self.model_label = FittedLabel("No model")
        self.speed_label = FittedLabel("")
        self.memory_label = QLabel("")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.setRange(0, 100)
        self.progress.setTextVisible(True)
        self.progress.hide()
        # The first permanent widget, stretching: the room a message keeps however many
        # fields the bar holds (a QStatusBar gives its message only what they leave).
        self.message_room = QWidget()
        self.message_room.setObjectName("message_room")
        self.message_room.setMinimumWidth(MESSAGE_ROOM)
        bar.addPermanentWidget(self.message_room, 1)
        for widget in (self.model_label, self.speed_label, self.progress, self.memory_label):
            bar.addPermanentWidget(widget)
        self.messages = MessagePainter(bar)

    def bind(self, model: ChatModel) -> None:
        """The speed follows the model's replies: live while one streams, the engine's
        figures when it ends, nothing for another conversation."""
        self.model = model
        model.events.tokens_added.connect(self._on_tokens)
        model.events.reply_finished.connect(self.reply_finished)
        model.events.busy_changed.connect(lambda busy: self.speed_label.setText("") if busy else None)
        model.events.conversation_changed.connect(lambda _c: self.clear_figures())

    def clear_figures(self) -> None:
        """Another conversation or another model: the last reply's speed is not this one's."""
        self.speed_label.setText("")
        self._first = {}

    def _on_tokens(self, stream: StreamKey) -> None:
        steps = self.model.steps_of(stream)
        if not steps or steps[-1].rank is not None:  # a scored text: its progress bar says how far
            return
        now, count = time.monotonic(), len(steps)
        first = self._first.setdefault(stream, (now, count))
        # A rate needs two tokens (the prefill is not in it) and a quarter of a second: tokens
        # that arrive together would read as a burst of thousands a second.
        if count > first[1] and now - first[0] >= RATE_AFTER_S:
            self.speed_label.setText(f"generating {(count - first[1]) / (now - first[0]):.1f} tok/s")

    def show_message(self, text: str, ms: int = 4000) -> None:
        self.bar.showMessage(text, ms)

    def loading(self, source: str) -> None:
        self.model_label.setText(f"Loading {source}…")
        self._set_fraction(0.0)
        self.progress.show()

    def model_progressed(self, stage: str, fraction: float) -> None:
        """``fraction`` < 0: a stage of unknown length (a busy bar, no number)."""
        self._set_fraction(fraction)
        self.bar.showMessage(f"Model: {stage}…")

    def _set_fraction(self, fraction: float) -> None:
        if fraction < 0:
            self.progress.setRange(0, 0)  # Qt draws an indeterminate (busy) bar
            self.progress.setFormat("loading")
            return
        self.progress.setRange(0, 100)
        self.progress.setFormat("loading %p%")
        self.progress.setValue(int(fraction * 100))

    def model_ready(self, name: str, message: str = "") -> None:
        """A model loaded: its label, and none of the figures of the one before."""
        self.clear_figures()
        self._show_model(name, message)

    def _show_model(self, name: str, message: str) -> None:
        self.model_label.set_forms(model_forms(name))
        self.progress.hide()
        if message:
            self.bar.showMessage(message, 4000)
        else:
            self.bar.clearMessage()

    def model_failed(self, label: str, message: str) -> None:
        """A load failed: the label of the model still in use (its figures stay), and no
        stale "Model: <stage>…"."""
        self._show_model(label, message)

    def stopping(self) -> None:
        """Esc or Stop: said at once; the reply ends between two prefill chunks or tokens."""
        self.bar.showMessage(STOPPING)
        self.progress.setFormat(STOPPING)

    def stopped(self) -> None:
        """No reply is running any more: the "Stopping…" has done its work."""
        if self.bar.currentMessage() == STOPPING:
            self.bar.clearMessage()
        if self.progress.format() == STOPPING:
            self.progress.setFormat("")

    def prefill_progressed(self, tag: int, done: int, total: int) -> None:
        if done >= total:
            self.progress.hide()
            self._prefilling = None
            return
        self._prefilling = tag
        if self.progress.format() != STOPPING:
            self.progress.setFormat(f"prefill {done}/{total}")
        self.progress.setRange(0, 100)
        self.progress.setValue(int(100 * done / max(total, 1)))
        self.progress.show()

    def request_ended(self, tag: int) -> None:
        """The worker's request ``tag`` ended (finished, cancelled, refused), shown or not: a
        prefill of it the bar shows is over (a served reply of a conversation not open ends
        with no ``reply_finished``; Stop serving cancels one in its prefill)."""
        if tag == self._prefilling:
            self._prefilling = None
            self.progress.hide()

    def reply_finished(self, finished: Finished) -> None:
        """The engine's figures for the reply that ended; only those it measured (a compare
        column that shared another's prefill has no prompt speed of its own, a reply stopped
        before its first token no generation speed, a scored text neither: the perplexity's
        label has its speed)."""
        self.progress.hide()
        self._first = {}
        if finished.finish_reason == FinishReason.SCORED:
            self.speed_label.setText("")
            return
        parts = []
        if (finished.prompt_tps or 0) > 0:
            parts.append(f"prompt {finished.prompt_tps:.1f} tok/s")
        if finished.generated_tokens > 0 and finished.generation_tps > 0:
            parts.append(f"generation {finished.generation_tps:.1f} tok/s")
        # In a narrow window the generation speed stays, the prompt's goes first.
        self.speed_label.set_forms([" · ".join(parts), *parts[-1:]])
        if finished.grammar is not None:
            self.show_message(finished_words(finished.grammar), 15_000)

    def memory_measured(self, nbytes: int) -> None:
        self.memory_label.setText(f"memory {nbytes / 2**20:.0f} MiB")
