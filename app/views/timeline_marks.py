"""What the timeline draws besides its curves: the token axis, and the dashed markers where
the sampling parameters changed, each saying what changed ("temperature 0.7 → 1.2").
Where a marker goes (not for a change of the seed alone) is :mod:`app.model.timeline_series`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyqtgraph as pg

from app.model.timeline_series import answer_base, change_label, params_diff, variant_applied
from app.views.plot_axes import CentredAxis
from app.views.theme import Colors
from engine.api.params import SamplingParams

HOVER_PX = 5
"""A marker's hover target reaches this many pixels either side of its dashed line."""


class TokenAxis(CentredAxis):
    """An axis of token indices: whole numbers only, however far it is zoomed in."""

    def __init__(self, orientation: str = "bottom") -> None:
        super().__init__(orientation)

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N802
        levels = super().tickSpacing(minVal, maxVal, size)
        whole = [(spacing, offset) for spacing, offset in levels if spacing >= 1 and float(spacing).is_integer()]
        return whole or [(1.0, 0.0)]


def change_lines(before: SamplingParams, after: SamplingParams) -> list[str]:
    """One line per field that changed: ``"temperature 0.7 → 1.2"``; the seed last (a new
    seed alone makes no marker: what changed the distribution comes first)."""
    if variant_applied(before, after):  # the end of the thinking: the answer's own settings
        return ["the answer's settings (think_variant):", *change_lines(answer_base(before), after)]
    names = sorted(params_diff(before, after), key=lambda name: name == "seed")
    return [f"{name} {format_value(getattr(before, name))} → {format_value(getattr(after, name))}" for name in names]


def format_value(value: Any) -> str:
    """A parameter's value as the sampling panel would show it."""
    if value is None:
        return "random"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}:{format_value(float(v))}" for k, v in value.items()) or "none"
    if isinstance(value, tuple):
        if all(isinstance(v, str) for v in value) and value and all(v.isidentifier() for v in value):
            return " › ".join(value)  # a stage order
        return ", ".join(repr(v) for v in value) or "none"
    return str(value)


class ChangeLine(pg.InfiniteLine):
    """A line whose hover target is ``HOVER_PX`` pixels either side of it: pyqtgraph's is
    its pen's width and a pixel, so a 1 px dashed line was all but impossible to hover."""

    def _computeBoundingRect(self):  # noqa: N802 - pyqtgraph's name
        rect = super()._computeBoundingRect()
        _, ortho = self.pixelVectors(direction=pg.Point(1, 0))
        half = HOVER_PX * (abs(ortho.y()) if ortho is not None else 0.0)
        if rect.isValid() and half > rect.height() / 2:
            rect.setTop(-half)  # the line's own coordinates: along x, across y
            rect.setBottom(half)
            self.prepareGeometryChange()
            self._bounds = rect
        return rect


def change_marker(before: SamplingParams, after: SamplingParams, index: int, colors: Colors) -> pg.InfiniteLine:
    """A dashed line before token ``index`` labelled with what changed; hover it (or its
    label) for the values."""
    line = ChangeLine(
        pos=index - 0.5,
        angle=90,
        pen=pg.mkPen(colors.bias, style=pg.QtCore.Qt.PenStyle.DashLine),
        label=change_label(before, after),
        labelOpts={"position": 0.95, "color": colors.bias},
    )
    tooltip = "\n".join([f"From token {index}:", *change_lines(before, after)])
    line.setToolTip(tooltip)
    line.label.setToolTip(tooltip)
    return line
