"""Draws resources/icon.png (1024 px): a candidate bar chart in a rounded square; and makes
the macOS app icon (.icns) from it.

    python packaging/make_icon.py                  # redraws resources/icon.png
    python packaging/make_icon.py --icns OUT.icns  # the .icns (packaging/logitscope.spec)

The .icns is written here rather than by Pillow, which is not installed on Linux, so the Linux
tests check the very icon the Mac build ships (tests/integration/test_packaging.py).
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QIODevice, QRectF, Qt  # noqa: E402
from PySide6.QtGui import QColor, QGuiApplication, QImage, QLinearGradient, QPainter, QPainterPath  # noqa: E402

SIZE = 1024
ICON = Path(__file__).resolve().parent.parent / "resources" / "icon.png"
# The .icns entries that hold PNG data (macOS 10.7 and later), by their pixel size: 16, 32, 128,
# 256 and 512 points at 1x and 2x. The same set Pillow and iconutil write.
ICNS_TYPES = {
    b"ic11": 32,
    b"ic12": 64,
    b"ic07": 128,
    b"ic13": 256,
    b"ic08": 256,
    b"ic14": 512,
    b"ic09": 512,
    b"ic10": 1024,
}


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


def png_bytes(image: QImage) -> bytes:
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


def write_icns(out: Path, source: Path = ICON) -> Path:
    """An .icns of ``source`` scaled to every size macOS asks for: 'icns', the file's length,
    then each entry as its type, its length (header included) and its PNG."""
    image = QImage(str(source))
    if image.isNull():
        raise SystemExit(f"cannot read the icon {source}")
    entries = b""
    for kind, pixels in ICNS_TYPES.items():
        scaled = image.scaled(
            pixels, pixels, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation
        )
        data = png_bytes(scaled)
        entries += kind + struct.pack(">I", 8 + len(data)) + data
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"icns" + struct.pack(">I", 8 + len(entries)) + entries)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--icns"]:
        print(write_icns(Path(sys.argv[2])))
    else:
        app = QGuiApplication(sys.argv[:1])
        draw(ICON)
        print(ICON)
