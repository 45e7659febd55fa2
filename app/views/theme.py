"""Light and dark palettes, and the colours the plots and the chat share."""

from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QToolTip


@dataclass(frozen=True)
class Colors:
    background: str
    foreground: str
    raw: str
    final: str
    chosen: str
    removed: str
    penalty: str
    bias: str
    marker: str
    dark: bool
    muted: str
    """Hints and other secondary text on the window's background: quieter than the text,
    still readable (the palette's disabled labels use it too)."""
    dry: str = "#9334e6"
    """DRY's change of a logit (Raw vs final), beside the bias (green) and penalty (red)."""
    accepted: str = "#ceead6"
    """A draft model's outcomes, as the chat shades them: a proposal accepted, a token the
    model drew after a rejection, a bonus token."""
    rejected: str = "#fad2cf"
    bonus: str = "#d2e3fc"


LIGHT = Colors(
    "#ffffff",
    "#202124",
    "#9aa0a6",
    "#1a73e8",
    "#e8710a",
    "#dadce0",
    "#d93025",
    "#188038",
    "#c5221f",
    False,
    "#5f6368",
)
DARK = Colors(
    "#1e1f22",
    "#e8eaed",
    "#80868b",
    "#8ab4f8",
    "#fcad70",
    "#3c4043",
    "#f28b82",
    "#81c995",
    "#f28b82",
    True,
    "#9aa0a6",
    "#d7aefb",
    accepted="#1e4620",
    rejected="#5c2320",
    bonus="#1c3a5e",
)


def dark_palette() -> QPalette:
    p = QPalette()
    base, window, text = QColor("#1e1f22"), QColor("#2b2d30"), QColor("#e8eaed")
    for role, color in (
        (QPalette.ColorRole.Window, window),
        (QPalette.ColorRole.WindowText, text),
        (QPalette.ColorRole.Base, base),
        (QPalette.ColorRole.AlternateBase, window),
        (QPalette.ColorRole.Text, text),
        (QPalette.ColorRole.Button, window),
        (QPalette.ColorRole.ButtonText, text),
        (QPalette.ColorRole.ToolTipBase, window),
        (QPalette.ColorRole.ToolTipText, text),
        (QPalette.ColorRole.Highlight, QColor("#8ab4f8")),
        (QPalette.ColorRole.HighlightedText, QColor("#1e1f22")),
        (QPalette.ColorRole.Link, QColor("#8ab4f8")),
        (QPalette.ColorRole.PlaceholderText, QColor("#9aa0a6")),
    ):
        p.setColor(role, color)
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor("#6f7378"))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor("#6f7378"))
    return p


def mute_disabled_labels(palette: QPalette, colors: Colors) -> QPalette:
    """A disabled label is how the panels show a hint; its text (``WindowText``) would
    otherwise be the palette's default, near white on the dark theme's grey."""
    palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor(colors.muted))
    return palette


def apply_theme(app: QApplication, name: str) -> Colors:
    """``name``: "light", "dark" or "system". Returns the colours in force."""
    # Setting the style again re-polishes every widget (0.15 s here, on every theme switch
    # and every window a process opens); the palette below is what a switch changes.
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")
    palette = dark_palette() if name == "dark" else app.style().standardPalette()
    if name == "system":
        colors = DARK if palette.color(QPalette.ColorRole.Window).lightness() < 128 else LIGHT
    else:
        colors = DARK if name == "dark" else LIGHT
    app.setPalette(mute_disabled_labels(palette, colors))
    # Tooltips keep a palette of their own, the platform's, which the application's does not
    # reach: the dark theme's light tooltip text stood on the light default base.
    QToolTip.setPalette(palette)
    pg.setConfigOptions(background=colors.background, foreground=colors.foreground, antialias=True)
    return colors


def probability_color(p: float, colors: Colors) -> str:
    """Red (unlikely) through amber to green (likely); softened for the theme."""
    hue = max(0.0, min(1.0, p)) * 120.0
    color = QColor.fromHslF(hue / 360.0, 0.65, 0.30 if colors.dark else 0.82)
    return color.name()


# Compare columns A, B, C, D (and the timeline's curves for them): distinct in both themes.
VARIANT_COLORS_LIGHT = ("#1a73e8", "#e8710a", "#188038", "#9334e6", "#c5221f", "#12a4af")
VARIANT_COLORS_DARK = ("#8ab4f8", "#fcad70", "#81c995", "#d7aefb", "#f28b82", "#78d9ec")


def variant_color(column: int, colors: Colors) -> str:
    palette = VARIANT_COLORS_DARK if colors.dark else VARIANT_COLORS_LIGHT
    return palette[column % len(palette)]
