"""Text and rows that fit the room they get, measured rather than cut off.

``FittedLabel``: a one-line label that shows the longest of its forms that fits its width
(the shortest elided if none does) and its whole text in its tooltip; a layout may squeeze
it down to its shortest form. ``WrapRow``: widgets side by side where the row is wide
enough for their natural sizes, else one under another, so a narrow panel neither cuts
them off nor scrolls sideways.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QRect, QSize, Qt
from PySide6.QtGui import QPainter, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

ELIDED_CHARS = 12
"""A label with one form may be squeezed down to about this many characters (elided)."""


class FittedLabel(QLabel):
    """``text()`` is the whole text; what is drawn is the longest of ``forms`` that fits."""

    def __init__(self, text: str = "") -> None:
        super().__init__()
        self.forms: tuple[str, ...] = ("",)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.set_forms([text])

    def set_forms(self, forms: Sequence[str]) -> None:
        """The label's text, longest (whole) first, then shorter forms of it."""
        self.forms = tuple(forms) or ("",)
        super().setText(self.forms[0])
        self.updateGeometry()
        self.update()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self.set_forms([text])

    def shown_text(self) -> str:
        """What the label draws at its present width."""
        width = self.contentsRect().width()
        metrics = self.fontMetrics()
        for form in self.forms:
            if metrics.horizontalAdvance(form) <= width:
                return form
        return metrics.elidedText(self.forms[-1], Qt.TextElideMode.ElideMiddle, width)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        metrics = self.fontMetrics()
        last = self.forms[-1]
        if len(self.forms) == 1 and len(last) > ELIDED_CHARS:
            last = last[:ELIDED_CHARS] + "…"
        margins = self.contentsMargins()
        width = metrics.horizontalAdvance(last) + margins.left() + margins.right()
        return QSize(width, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        shown = self.shown_text()
        self.setToolTip("" if shown == self.forms[0] else self.forms[0])

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        self.style().drawItemText(
            painter,
            self.contentsRect(),
            int(self.alignment()),
            self.palette(),
            self.isEnabled(),
            self.shown_text(),
            self.foregroundRole(),
        )


class WrapRow(QWidget):
    """``widgets`` side by side (extra width shared by their stretch factors) where they fit
    at their size hints, else stacked; its minimum width is the widest one's minimum. It
    places them itself: a layout's own minimum would hold the row at its widest."""

    def __init__(self, widgets: Sequence[tuple[QWidget, int]], spacing: int = 6) -> None:
        super().__init__()
        self.widgets = [(widget, stretch) for widget, stretch in widgets]
        self.spacing = spacing
        for widget, _ in self.widgets:
            widget.setParent(self)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def _shown(self) -> list[tuple[QWidget, int]]:
        return [(w, stretch) for w, stretch in self.widgets if not w.isHidden()]

    def side_by_side_width(self) -> int:
        shown = self._shown()
        return sum(w.sizeHint().width() for w, _ in shown) + self.spacing * max(len(shown) - 1, 0)

    def fits(self, width: int) -> bool:
        return width >= self.side_by_side_width()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        heights = [w.sizeHint().height() for w, _ in self._shown()]
        return QSize(self.side_by_side_width(), max(heights, default=0))

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        shown = [w for w, _ in self._shown()]
        width = max((w.minimumSizeHint().width() for w in shown), default=0)
        return QSize(width, self.heightForWidth(width))

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt's name
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt's name
        heights = [w.sizeHint().height() for w, _ in self._shown()]
        if self.fits(width):
            return max(heights, default=0)
        return sum(heights) + self.spacing * max(len(heights) - 1, 0)

    def arrange(self, width: int) -> None:
        """Side by side or stacked, for ``width``."""
        shown = self._shown()
        if self.fits(width):
            extra = width - self.side_by_side_width()
            stretch = sum(s for _, s in shown)
            height = self.heightForWidth(width)
            x = 0
            for widget, s in shown:
                hint = widget.sizeHint()
                w = hint.width() + (extra * s // stretch if stretch else 0)
                widget.setGeometry(QRect(x, (height - hint.height()) // 2, w, hint.height()))
                x += w + self.spacing
            return
        y = 0
        for widget, _ in shown:
            h = widget.sizeHint().height()
            widget.setGeometry(QRect(0, y, width, h))
            y += h + self.spacing

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self.arrange(event.size().width())

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a child's size hint changed
            self.updateGeometry()
            self.arrange(self.width())
        return super().event(event)
