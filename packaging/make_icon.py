"""Draws resources/icon.png (1024 px): a candidate bar chart in a rounded square.

    python packaging/make_icon.py

The .icns for macOS is made from this PNG at build time (packaging/logitscope.spec).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QRectF, Qt  # noqa: E402
from PySide6.QtGui import QColor, QGuiApplication, QImage, QLinearGradient, QPainter, QPainterPath  # noqa: E402

SIZE = 1024


def draw(path: Path) -> None:
    image = QImage(SIZE, SIZE, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    margin = SIZE * 0.09
    square = QRectF(margin, margin, SIZE - 2 * margin, SIZE - 2 * margin)
    gradient = QLinearGradient(square.topLeft(), square.bottomRight())
    gradient.setColorAt(0, QColor("#1f2430"))
    gradient.setColorAt(1, QColor("#0f1218"))
    outline = QPainterPath()
    outline.addRoundedRect(square, SIZE * 0.2, SIZE * 0.2)
    p.fillPath(outline, gradient)
    # Candidate bars: grey = raw, coloured = final; the chosen one in orange.
    bars = [(0.78, 0.86, "#fcad70"), (0.55, 0.42, "#8ab4f8"), (0.33, 0.0, "#8ab4f8"), (0.22, 0.0, "#8ab4f8")]
    left = square.left() + square.width() * 0.16
    top = square.top() + square.height() * 0.17
    row = square.height() * 0.17
    width = square.width() * 0.68
    for i, (raw, final, color) in enumerate(bars):
        y = top + i * row
        p.fillRect(QRectF(left, y, width * raw, row * 0.32), QColor("#80868b"))
        if final:
            p.fillRect(QRectF(left, y + row * 0.38, width * final, row * 0.32), QColor(color))
        else:
            p.setPen(QColor("#5f6368"))
            p.drawLine(int(left), int(y + row * 0.54), int(left + width * 0.1), int(y + row * 0.54))
    p.end()
    image.save(str(path))


if __name__ == "__main__":
    app = QGuiApplication(sys.argv[:1])
    out = Path(__file__).resolve().parent.parent / "resources" / "icon.png"
    draw(out)
    print(out)
