"""``python -m tools.precision_shot --out PATH``: docs/APP.md's screenshot of Check precision….

Runs the app offscreen in a throwaway profile with ``--model`` (default: the default model)
computing in ``--precision`` (default float16, so the check has something to show), sends
``--prompt`` greedily, checks the reply against float32 and saves the dialog. Half
precision is slow on a CPU (MLX has no half-precision matrix kernels there): a small model
and few tokens keep it short.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.precision_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--precision", default="float16")
    p.add_argument("--prompt", default="What is the capital of France?")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.model.precision import CHOICE
    from app.shell.window import MainWindow
    from engine.api.params import SamplingParams
    from tools.shot_window import show_at, waiter

    app = QApplication.instance() or QApplication(sys.argv[:1])
    scratch = Path(tempfile.mkdtemp(prefix="logitscope-precision-shot-"))
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    CHOICE.save(settings, args.model, args.precision)  # before the window loads the model
    window = MainWindow(db_path=scratch / "db.sqlite3", settings=settings, model=args.model)
    window.set_theme("light")
    show_at(window, "1200x800")
    wait = waiter(app, args.timeout)
    if not wait(lambda: window.model_info is not None or window.last_error) or window.last_error:
        print(f"error: the model did not load ({window.last_error})", file=sys.stderr)
        return 1
    window.model.generation.send(args.prompt, SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    wait(lambda: not window.busy())
    branch = window.model.last_assistant().branch
    window.select_token((("branch", branch.id), 0))
    if window.precision_check.start() is None or not wait(lambda: window.precision_check.dialog is not None):
        print(f"error: the check did not finish ({window.last_error})", file=sys.stderr)
        return 1
    dialog = window.precision_check.dialog
    for _ in range(5):
        app.processEvents()
    ok = dialog.grab().save(args.out)
    print(dialog.summary)
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
