"""Plots out as PNG or SVG: the timeline (pyqtgraph's exporters) and the inspector."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg


def save_plot(widget, path: str | Path) -> None:
    """PNG or SVG (by the suffix) of a pyqtgraph view (its scene, with pyqtgraph's exporters)
    or of any other widget (grabbed; SVG through QSvgGenerator)."""
    path = str(path)
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
