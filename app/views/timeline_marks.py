"""What the timeline draws besides its curves: the token axis, and the dashed markers where
the sampling parameters changed, each saying what changed ("temperature 0.7 → 1.2").
Where a marker goes (not for a change of the seed alone) is :mod:`app.model.timeline_series`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyqtgraph as pg

from app.model.timeline_series import answer_base, change_label, params_diff, variant_applied
from app.views.plot_axes import CentredAxis
from app.views.theme import Colors
from engine.api.params import SamplingParams

RING_PX = 8
"""The p plot's margin above 1 and below 0, in pixels: half the argmax ring (13 px) and
more, so a point at 1.0 is drawn whole (it was clipped at the range's top), and the labels
of 0 and 1 fit within the axis (at 0–1.05 only 0.5 was labelled)."""
LABEL_PLACES = (0.92, 0.5, 0.08)
"""Where along a change line its label may go (a fraction of the plot's height)."""
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


def fit_p_range(plot: pg.PlotItem) -> None:
    """The p plot's y range: 0–1 and ``RING_PX`` pixels either side at its present height."""
    pad = RING_PX / max(plot.vb.height() - 2 * RING_PX, 1.0)
    plot.setYRange(-pad, 1 + pad, padding=0)


def label_place(
    x: Sequence[float], p: Sequence[float], boxes: Mapping[float, tuple[float, float, float, float]]
) -> float:
    """The place along a change line (a fraction of its height, a key of ``boxes``) where
    its label covers the fewest points (``x`` tokens, ``p`` values), then stays farthest from
    them. ``boxes``: the label's rectangle at each place, in the plot's coordinates (left,
    right, bottom, top), as pyqtgraph draws it there: it slides a vertical line's label
    across the line as well as along it. (A label once sat on points at 1.0, then
    on points a few tokens away, which a label reaches on a long reply.)"""
    xs, ps = np.asarray(x, float), np.asarray(p, float)

    def cost(place: float) -> tuple[int, float]:
        left, right, bottom, top = boxes[place]
        beside = (xs >= left) & (xs <= right)
        covered = beside & (ps >= bottom) & (ps <= top)
        middle = (bottom + top) / 2
        return int(np.count_nonzero(covered)), -float(np.abs(ps[beside] - middle).min(initial=np.inf))

    return min(boxes, key=cost)


def place_labels(lines: Sequence[pg.InfiniteLine], vb: pg.ViewBox, x: Sequence[float], p: Sequence[float]) -> None:
    """Each change line's label where it covers the fewest points, measured as drawn at each
    place at the plot's present size and token range: placed once, a label came to sit on
    the points the reply added after it (:func:`label_place`)."""
    if vb.width() <= 1 or vb.height() <= 1:
        return  # not laid out yet
    (x_low, x_high), (y_low, y_high) = vb.viewRange()
    pad_x, pad_y = 3 * (x_high - x_low) / vb.width(), 3 * (y_high - y_low) / vb.height()
    for line in lines:
        boxes = {}
        for place in LABEL_PLACES:
            line.label.setPosition(place)
            box = vb.mapSceneToView(line.label.mapRectToScene(line.label.boundingRect())).boundingRect()
            boxes[place] = (box.left() - pad_x, box.right() + pad_x, box.top() - pad_y, box.bottom() + pad_y)
        line.label.setPosition(label_place(x, p, boxes))


def change_marker(
    before: SamplingParams, after: SamplingParams, index: int, colors: Colors, place: float = LABEL_PLACES[0]
) -> pg.InfiniteLine:
    """A dashed line before token ``index`` labelled (at ``place`` along it) with what
    changed; hover it (or its label) for the values."""
    line = ChangeLine(
        pos=index - 0.5,
        angle=90,
        pen=pg.mkPen(colors.bias, style=pg.QtCore.Qt.PenStyle.DashLine),
        label=change_label(before, after),
        labelOpts={"position": place, "color": colors.bias},
    )
    tooltip = "\n".join([f"From token {index}:", *change_lines(before, after)])
    line.setToolTip(tooltip)
    line.label.setToolTip(tooltip)
    return line
