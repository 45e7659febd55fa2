"""The Layers tab's heat map: one position of the logit lens as layers (rows, the last layer
at the top, layer 0 — the embedding output — at the bottom) × candidates (columns: the last
layer's most likely tokens, and the chosen token when it is not among them).

A cell is the token's probability at that layer, coloured as the chain view colours its
cells (square-root scale, so a 1 % token is still visible beside a 90 % one). Every layer
carries the final candidates' numbers (``LensLayer.final_top_logprobs``); in a row read
before it did, a candidate outside a layer's list is known only to be below that list's
last entry: its cell is hatched and reads ``<0.3%``. The chosen token's column is framed; the
layer from which it stays the most likely is marked by a dashed line under it and a bold
layer number; on the right, each layer's own most likely token, orange where it is not the
chosen one. Painted by hand rather than as a table: every layer fits the tab's height
(31 rows for the default model) and the column labels turn 45° when they do not fit flat.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QHelpEvent, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from app.model.lens_grid import LensGrid
from app.views.chain_view import format_p
from app.views.theme import LIGHT, Colors

MAX_ROW = 24
"""Pixels per layer at the most (a model of few layers); rows shrink to fit the tab's height,
their labels thinned to one a line apart."""
RIGHT_MAX = 150
"""The widest the column of each layer's own top token gets (longer tokens are elided)."""
LABEL_MAX = 96
"""The longest a turned column label gets (px along the text)."""
RIGHT = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight
LEFT = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft
DIFFERS = "#c26a00"
"""A layer whose most likely token is not the chosen one (readable on both themes)."""


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * t,
        a.greenF() + (b.greenF() - a.greenF()) * t,
        a.blueF() + (b.blueF() - a.blueF()) * t,
    )


class LensHeatmap(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.grid: LensGrid | None = None
        self.colors: Colors = LIGHT
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        small = QFont(self.font())
        small.setPointSizeF(max(7.0, small.pointSizeF() - 1))
        self.small = small

    def set_grid(self, grid: LensGrid | None, colors: Colors | None = None) -> None:
        self.grid, self.colors = grid, colors or self.colors
        if grid is not None:  # a model of few layers gets rows of MAX_ROW, not the tab's height
            header = LABEL_MAX * math.sqrt(0.5) + QFontMetrics(self.font()).height()
            self.setMaximumHeight(int(header + len(grid.tops) * MAX_ROW + 8))
        self.updateGeometry()
        self.update()

    # Geometry ---------------------------------------------------------------------------------

    def _boxes(self) -> tuple[float, float, float, float, float, bool]:
        """(left, top, right, column width, row height, labels turned) for the widget's size."""
        grid = self.grid
        fm, small = QFontMetrics(self.font()), QFontMetrics(self.small)
        left = max(fm.horizontalAdvance("layer"), fm.horizontalAdvance("00")) + 12
        widest_top = max(fm.horizontalAdvance(t) + small.horizontalAdvance("  100%") for t in grid.top_labels)
        right = min(RIGHT_MAX, max(widest_top, fm.horizontalAdvance("layer's top")) + 12)
        width = max(1.0, self.width() - left - right)
        column = width / len(grid.tokens)
        widest = max(fm.horizontalAdvance(label) for label in grid.labels) + 8
        turned = widest > column
        top = fm.height() + 8 if not turned else min(widest, LABEL_MAX) * math.sqrt(0.5) + fm.height()
        rows = len(grid.tops)
        row = max(1.0, min(MAX_ROW, (self.height() - top - 4) / rows))
        return left, top, right, column, row, turned

    def sizeHint(self) -> QSize:
        rows = len(self.grid.tops) if self.grid is not None else 10
        return QSize(480, 80 + rows * 16)

    def minimumSizeHint(self) -> QSize:
        return QSize(240, 160)  # the inspector's dock must stay free to shrink (docs/APP.md, Layout)

    def cell_at(self, x: float, y: float) -> tuple[int | None, int | None]:
        """(layer, column) under a point; column None: the layer's label or its own top token;
        layer None: the column labels."""
        if self.grid is None:
            return None, None
        left, top, _right, column, row, _ = self._boxes()
        layers = self.grid.layers
        layer = layers - int((y - top) // row) if y >= top else None
        if layer is not None and not 0 <= layer <= layers:
            return None, None
        c = int((x - left) // column) if x >= left else None
        if c is not None and c >= len(self.grid.tokens):
            c = None
        return layer, c

    # Painting ---------------------------------------------------------------------------------

    def paintEvent(self, _event) -> None:
        if self.grid is None:
            return
        grid, colors = self.grid, self.colors
        left, top, right, column, row, turned = self._boxes()
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        background, final = QColor(colors.background), QColor(colors.final)
        rows = len(grid.tops)
        painter.fillRect(QRectF(left, top, column * len(grid.tokens), row * rows), background)
        small = QFontMetrics(self.small)
        cell_text = row >= small.height() and column >= small.horizontalAdvance("100.0%") + 4
        painter.setFont(self.small)
        hatch = QBrush(_mix(background, QColor(colors.removed), 0.9), Qt.BrushStyle.BDiagPattern)
        for layer in range(rows):
            y = top + (grid.layers - layer) * row
            for c in range(len(grid.tokens)):
                rect = QRectF(left + c * column, y, column, row)
                p = grid.probs[layer, c]
                if math.isnan(p):
                    painter.fillRect(rect, hatch)
                    text, pen = f"<{format_p(grid.floors[layer])}", QColor(colors.muted)
                else:
                    heat = 0.85 * math.sqrt(max(0.0, p))
                    painter.fillRect(rect, _mix(background, final, heat))
                    strong = heat > 0.55 and not colors.dark
                    text, pen = format_p(p), QColor(colors.background if strong else colors.foreground)
                if cell_text:
                    painter.setPen(pen)
                    painter.drawText(rect.adjusted(2, 0, -3, 0), RIGHT, text)
        self._paint_layers(painter, left, top, right, column, row)
        self._paint_labels(painter, left, top, column, turned)
        # The chosen token's column, framed over its label and every layer.
        painter.setPen(QPen(QColor(colors.chosen), 2))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        x = left + grid.chosen_column * column
        painter.drawRect(QRectF(x + 1, top - 2, column - 2, row * rows + 3))
        painter.end()

    def _paint_layers(self, painter: QPainter, left: float, top: float, right: float, column: float, row: float):
        """Layer numbers on the left, each layer's own top token on the right, the decided line."""
        grid, colors = self.grid, self.colors
        fm = QFontMetrics(self.font())
        every = max(1, math.ceil(fm.height() / row))  # labels a line apart when rows are thin
        right_x = left + column * len(grid.tokens) + 6
        painter.setFont(self.font())
        painter.setPen(QColor(colors.muted))
        painter.drawText(QRectF(0, top - fm.height() - 4, left - 6, fm.height()), Qt.AlignmentFlag.AlignRight, "layer")
        painter.drawText(
            QRectF(right_x, top - fm.height() - 4, right, fm.height()), Qt.AlignmentFlag.AlignLeft, "layer's top"
        )
        bold = QFont(self.font())
        bold.setBold(True)
        for layer in range(len(grid.tops)):
            y = top + (grid.layers - layer) * row
            line = y + (row - fm.height()) / 2  # a line of text centred on its row, however thin the row
            rect = QRectF(0, line, left - 6, fm.height())
            decided = layer == grid.decided_at
            if decided or layer in (0, grid.layers) or layer % every == 0:
                painter.setFont(bold if decided else self.font())
                painter.setPen(QColor(colors.chosen if decided else colors.foreground))
                painter.drawText(rect, RIGHT, str(layer))
            if layer % every and layer not in (0, grid.layers):
                continue
            token, p = grid.tops[layer]
            text = fm.elidedText(grid.top_labels[layer], Qt.TextElideMode.ElideRight, int(right - 48))
            painter.setFont(self.font())
            painter.setPen(QColor(colors.foreground if token == grid.chosen else DIFFERS))
            box = QRectF(right_x, line, right - 6, fm.height())
            painter.drawText(box, LEFT, text)
            painter.setFont(self.small)
            painter.setPen(QColor(colors.muted))
            painter.drawText(box, RIGHT, format_p(p))
        if grid.decided_at is not None and grid.decided_at > 0:
            y = top + (grid.layers - grid.decided_at + 1) * row
            pen = QPen(QColor(colors.chosen), 1.5, Qt.PenStyle.DashLine)
            painter.setPen(pen)
            painter.drawLine(QPointF(left - 4, y), QPointF(right_x + right - 6, y))

    def _paint_labels(self, painter: QPainter, left: float, top: float, column: float, turned: bool) -> None:
        """Each column's token: flat and elided to its column, or turned 45° when they do not fit."""
        grid, colors = self.grid, self.colors
        fm = QFontMetrics(self.font())
        bold = QFont(self.font())
        bold.setBold(True)
        for c, label in enumerate(grid.labels):
            chosen = c == grid.chosen_column
            painter.setFont(bold if chosen else self.font())
            painter.setPen(QColor(colors.chosen if chosen else colors.foreground))
            if not turned:
                rect = QRectF(left + c * column, top - fm.height() - 6, column, fm.height())
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, label)
                continue
            text = fm.elidedText(label, Qt.TextElideMode.ElideRight, LABEL_MAX)
            painter.save()
            painter.translate(left + (c + 0.5) * column, top - 6)
            painter.rotate(-45)
            painter.drawText(QPointF(0, fm.descent()), text)
            painter.restore()

    # Tooltips ---------------------------------------------------------------------------------

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            text = self.tooltip_at(event.pos().x(), event.pos().y())
            if text:
                QToolTip.showText(event.globalPos(), text, self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)

    def tooltip_at(self, x: float, y: float) -> str:
        grid = self.grid
        layer, c = self.cell_at(x, y)
        if grid is None or (layer is None and c is None):
            return ""
        if layer is None:
            return f"“{grid.labels[c]}”: {'the chosen token' if c == grid.chosen_column else 'a candidate'}"
        name = "layer 0 (the embedding output)" if layer == 0 else f"layer {layer}"
        if c is None:
            token, p = grid.tops[layer]
            return f"{name}: most likely “{grid.top_labels[layer]}” ({format_p(p)})"
        p = grid.probs[layer, c]
        rank = f", rank {grid.rank_chosen[layer]}" if c == grid.chosen_column else ""
        if math.isnan(p):
            below = format_p(grid.floors[layer])
            return f"{name}: “{grid.labels[c]}” is not among its most likely tokens (p < {below})"
        return f"{name}: “{grid.labels[c]}” p = {format_p(p)}{rank}"
