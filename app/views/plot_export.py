"""Plots out as PNG or SVG: the timeline (pyqtgraph's exporters) and the inspector.

A pyqtgraph view is exported at a readable size, not the size its dock gives it: a
timeline docked 160 px high came out 1400×160, its rows a few pixels each. For the export
the view is laid out at least ``READABLE_WIDTH`` wide and ``READABLE_ROW`` high per plot
row, then put back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QSize

READABLE_WIDTH = 1200
READABLE_ROW = 180  # pixels per plot row, its axes included


def readable_size(view: pg.GraphicsView) -> QSize:
    """The view's size, grown to ``READABLE_WIDTH`` and ``READABLE_ROW`` per shown plot."""
    layout = getattr(view, "ci", None)  # a GraphicsLayoutWidget's items
    items = list(layout.items) if layout is not None else []
    rows = sum(1 for item in items if isinstance(item, pg.PlotItem) and item.isVisible()) or 1
    return QSize(max(view.width(), READABLE_WIDTH), max(view.height(), rows * READABLE_ROW))


@contextmanager
def laid_out_at(view: pg.GraphicsView, size: QSize) -> Iterator[None]:
    """``view`` resized to ``size`` (its scene follows at once), then back."""
    before = view.size()
    view.resize(size)
    try:
        yield
    finally:
        view.resize(before)


def save_plot(widget, path: str | Path) -> None:
    """PNG or SVG (by the suffix) of a pyqtgraph view (its scene, with pyqtgraph's exporters,
    at a readable size) or of any other widget (grabbed; SVG through QSvgGenerator)."""
    if isinstance(widget, pg.GraphicsView):
        with laid_out_at(widget, readable_size(widget)):
            _save(widget, str(path))
    else:
        _save(widget, str(path))


def _save(widget, path: str) -> None:
    svg = path.lower().endswith(".svg")
    if isinstance(widget, pg.GraphicsView):
        from pyqtgraph.exporters import ImageExporter, SVGExporter

        item = widget.scene()
        try:
            (SVGExporter(item) if svg else ImageExporter(item)).export(path)
            return
        except ValueError:  # pyqtgraph's SVG exporter cannot read some paths Qt 6 writes: draw it
            if not svg:
                raise
    if not svg:
        widget.grab().save(path)
        return
    from PySide6.QtCore import QPoint, QRect, QSize
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    generator = QSvgGenerator()
    generator.setFileName(path)
    generator.setSize(QSize(widget.width(), widget.height()))
    generator.setViewBox(QRect(0, 0, widget.width(), widget.height()))
    painter = QPainter(generator)
    try:
        if isinstance(widget, pg.GraphicsView):  # QGraphicsView.render draws the scene as vectors
            widget.render(painter)
        else:
            widget.render(painter, QPoint(0, 0))
    finally:
        painter.end()
