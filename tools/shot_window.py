"""What the screenshot commands share (``python -m tools.screenshot``, ``tools.score_shot``,
``tools.remote_shot``): a window on a throwaway profile, sized and shown, and a wait that
runs the event loop until a condition holds or the command's time is up."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.shell.window import MainWindow


def scratch_window(model: str, prefix: str, theme: str = "light") -> MainWindow:
    """A window whose database and settings live in a new temporary folder."""
    from PySide6.QtCore import QSettings

    from app.shell.window import MainWindow

    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(db_path=scratch / "db.sqlite3", settings=settings, model=model)
    window.set_theme(theme)
    return window


def show_at(window: MainWindow, size: str) -> None:
    """Resize to ``size`` ("WIDTHxHEIGHT") and show."""
    width, height = (int(v) for v in size.lower().split("x"))
    window.resize(width, height)
    window.show()


def waiter(app, timeout: float) -> Callable[[Callable[[], object]], bool]:
    """``wait(condition)``: process events until ``condition()`` is true (True) or until
    ``timeout`` seconds from now have passed (False); one deadline for every call."""
    deadline = time.monotonic() + timeout

    def wait(condition: Callable[[], object]) -> bool:
        while not condition():
            if time.monotonic() > deadline:
                return False
            app.processEvents()
            time.sleep(0.01)
        return True

    return wait
