"""Plot axes that stay readable on short plots.

``CentredAxis``: pyqtgraph centres an axis title only when the axis is resized, so a title
changed without a resize kept the old title's position (a longer one ran past its plot and
over its neighbour's). ``ValueAxis``, the timelines' value axis: its labelled ticks are at
least a label's height apart however short the plot (pyqtgraph always labels its first
level, and a narrow range on a short plot overprinted "0 1 2"), and its title is the
longest of its forms that fits the axis's length (``p(final)``, else ``p``), the whole
title in its tooltip.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtGui import QFontMetrics

TICK_GAP = 1.25
"""Labelled ticks are at least this many label heights apart."""


class CentredAxis(pg.AxisItem):
    """An axis whose title is centred again whenever it changes."""

    def __init__(self, orientation: str) -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)  # "(x0.001)" would read as a unit

    def setLabel(self, text=None, units=None, unitPrefix=None, **kwargs) -> None:  # noqa: N802, N803 - pyqtgraph's names
        super().setLabel(text, units, unitPrefix, **kwargs)
        self.resizeEvent()  # where pyqtgraph places the title


def nice_step(least: float) -> float:
    """The smallest 1, 2 or 5 × 10^k that is at least ``least``."""
    if least <= 0 or not math.isfinite(least):
        return 1.0
    power = 10.0 ** math.floor(math.log10(least))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if factor * power >= least * (1 - 1e-9):
            return factor * power
    return 10.0 * power


def short_title(title: str) -> str:
    """A title's first word: ``H last stage`` → ``H``, ``p(final)`` → ``p``."""
    return re.split(r"[ (]", title.strip(), maxsplit=1)[0] or title


class ValueAxis(CentredAxis):
    """A left axis for short plots: labelled ticks a label's height apart, a title that fits.

    ``labelText`` stays the whole title; what is drawn is the longest of the title, the
    ``shorter`` forms given and its first word that fits the axis's height.
    """

    def __init__(self, orientation: str = "left", shorter: Sequence[str] = ()) -> None:
        self.shorter = tuple(shorter)
        self._drawn_title = ""
        super().__init__(orientation)

    def titles(self) -> list[str]:
        full = self.labelText
        forms = [full, *self.shorter, short_title(full)]
        return [t for i, t in enumerate(forms) if t and t not in forms[:i]]

    def fitted_title(self) -> str:
        """The longest title form that fits along the axis (its last form if none does)."""
        forms = self.titles()
        if not forms:
            return ""
        metrics = QFontMetrics(self.label.font())
        length = self.size().height() if self.orientation in ("left", "right") else self.size().width()
        return next((t for t in forms if metrics.horizontalAdvance(t) + 8 <= length), forms[-1])

    def labelString(self) -> str:  # noqa: N802 - pyqtgraph's name
        self._drawn_title = self.fitted_title()
        self.setToolTip(self.labelText if self._drawn_title != self.labelText else "")
        style = ";".join(f"{k}: {v}" for k, v in self.labelStyle.items())
        return f"<span style='{style}'>{self._drawn_title}</span>"

    def resizeEvent(self, ev=None) -> None:  # noqa: N802 - Qt's name
        if self.label is not None and self.labelText and self.fitted_title() != self._drawn_title:
            super().setLabel(self.labelText)  # drawn again in the form that fits now
        super().resizeEvent(ev)

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803 - pyqtgraph's names
        levels = super().tickSpacing(minVal, maxVal, size)
        if not levels or size <= 0 or maxVal <= minVal:
            return levels
        line = QFontMetrics(self.style.get("tickFont") or self.font()).height()
        spacing = levels[0][0]
        for _ in range(30):  # 1, 2, 5 × 10^k upwards until the labels drawn are apart
            if labels_apart(minVal, maxVal, size, spacing, line):
                break
            spacing = nice_step(spacing * 1.01)
        return levels if spacing == levels[0][0] else [(spacing, 0.0)]  # one level: ticks with room


def labels_apart(low: float, high: float, size: float, spacing: float, line: float) -> bool:
    """Whether the labels of ticks every ``spacing`` over ``low``–``high`` drawn along
    ``size`` pixels are ``TICK_GAP`` lines apart. pyqtgraph draws a label only where it
    fits within the axis (a label is about 0.8 of a line, centred on its tick), so only
    those count: on a short plot a finer spacing may leave one label in the middle."""
    per_pixel = (high - low) / size
    first = math.ceil(low / spacing) * spacing
    count = int((high - first) / spacing + 1e-9) + 1
    pixels = [(first + k * spacing - low) / per_pixel for k in range(max(count, 0))]
    half = 0.4 * line
    drawn = [p for p in pixels if half <= p <= size - half]
    return all(b - a >= TICK_GAP * line for a, b in zip(drawn, drawn[1:], strict=False))
