"""Files in ``resources/``, from the source tree or from inside the frozen app."""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtGui import QIcon


def resource_path(name: str) -> Path:
    base = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and base is not None:
        return Path(base) / "resources" / name
    return Path(__file__).resolve().parent.parent.parent / "resources" / name


def app_icon() -> QIcon:
    return QIcon(str(resource_path("icon.png")))
