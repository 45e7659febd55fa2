"""``python -m app`` / ``logitscope``: the desktop app.

``--screenshot PATH [--prompt TEXT] [--select-token N]`` runs it offscreen with
the default model, sends the prompt, waits for the reply, selects token N,
saves a screenshot of the whole window and exits.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="logitscope")
    parser.add_argument("--model", default=None, help="default | PATH | REPO")
    parser.add_argument("--screenshot", metavar="PATH", help="save a screenshot and exit")
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument("--select-token", type=int, default=None)
    parser.add_argument("--theme", choices=["system", "light", "dark"], default=None)
    parser.add_argument("--color-tokens", action="store_true")
    parser.add_argument("--params", default=None, help="sampling parameters as JSON (screenshot mode)")
    parser.add_argument("--selftest", action="store_true", help="load the default model, generate, report, exit")
    parser.add_argument("--timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.screenshot or args.selftest:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Logitscope")
    app.setOrganizationName("Logitscope")
    from app.resources import app_icon

    app.setWindowIcon(app_icon())
    if args.selftest:
        from app.selftest import run_selftest

        return run_selftest(app, args.model or "default", args.timeout)
    if args.screenshot:
        return screenshot(app, args)
    window = MainWindow(model=args.model)
    if args.theme:
        window.set_theme(args.theme)
    window.show()
    return app.exec()


def screenshot(app, args: argparse.Namespace) -> int:
    """Run one exchange in a throwaway profile and save the window."""
    import time

    from PySide6.QtCore import QSettings

    from app.window import MainWindow

    scratch = Path(tempfile.mkdtemp(prefix="logitscope-shot-"))
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(db_path=scratch / "db.sqlite3", settings=settings, model=args.model or "default")
    window.set_theme(args.theme or "light")
    window.color_toggle.setChecked(args.color_tokens)
    if args.params:
        import json

        from engine.params import SamplingParams

        window.controls.set_params(SamplingParams.from_dict(json.loads(args.params)))
    window.resize(1500, 900)
    window.show()
    deadline = time.monotonic() + args.timeout

    def wait(condition) -> bool:
        while not condition():
            if time.monotonic() > deadline:
                return False
            app.processEvents()
            time.sleep(0.01)
        return True

    if not wait(lambda: window.model_info is not None or window.last_error):
        print("error: the model did not load in time", file=sys.stderr)
        return 1
    if window.last_error:
        print(f"error: {window.last_error}", file=sys.stderr)
        return 1
    window.composer.setPlainText(args.prompt)
    window.send()
    wait(lambda: not window.busy())
    if args.select_token is not None and window.selected is not None:
        entry = window.selected[0]
        index = min(args.select_token, len(window.entries[entry].steps) - 1)
        window.select_token(entry, index)
    window._dirty = True
    window._redraw_if_dirty()
    app.processEvents()
    ok = window.grab().save(args.screenshot)
    window.close()
    if not ok:
        print(f"error: could not write {args.screenshot}", file=sys.stderr)
        return 1
    print(args.screenshot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
