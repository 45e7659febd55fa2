"""What the screenshot commands share (``python -m tools.screenshot``, ``tools.score_shot``,
``tools.remote_shot``, ``tools.draft_shot``, ``tools.grammar_shot``, …): a window on a throwaway
profile, sized and shown, a wait that runs the event loop until a condition holds or the
command's time is up, and for the commands that show one reply of a loaded model, their common
flags, the window with its model loaded, and the last redraws before it is saved."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def add_window_flags(p: argparse.ArgumentParser, timeline_height: int = 330, timeout: float = 900.0) -> None:
    """``--model``, ``--timeline-height``, ``--size``, ``--theme`` and ``--timeout``."""
    p.add_argument("--model", default="default")
    p.add_argument("--timeline-height", type=int, default=timeline_height, help="height of the timeline dock (px)")
    p.add_argument("--size", default="1500x900")
    p.add_argument("--theme", default="light", choices=("light", "dark"))
    p.add_argument("--timeout", type=float, default=timeout)


def loaded_window(args: argparse.Namespace, prefix: str) -> tuple[Any, MainWindow, Callable] | None:
    """(the application, a scratch window of ``args``' size and timeline height, its wait) once
    ``args.model`` has loaded; None, having said why on stderr, when it did not."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = scratch_window(args.model, prefix, args.theme)
    show_at(window, args.size)
    window.resizeDocks([window.timeline_dock], [args.timeline_height], Qt.Orientation.Vertical)
    wait = waiter(app, args.timeout)
    if not wait(lambda: window.model_info is not None or window.last_error) or window.last_error:
        print(f"error: the model did not load ({window.last_error})", file=sys.stderr)
        return None
    return app, window, wait


def save_window(app, window: MainWindow, out: str) -> bool:
    """Let every view redraw what it was told last, then save the window to ``out``."""
    for _ in range(5):
        window._redraw_if_dirty()
        app.processEvents()
        time.sleep(0.05)
    return window.grab().save(out)


def send_and_wait(window: MainWindow, wait: Callable, prompt: str) -> Any:
    """Send ``prompt`` as the settings stand and wait for the whole reply: its saved message
    (its branch's steps are the reply's), every view redrawn."""
    window.composer.setPlainText(prompt)
    window.send()
    wait(lambda: window.busy())
    wait(lambda: not window.busy())
    window._redraw_if_dirty()
    return window.model.last_assistant()
