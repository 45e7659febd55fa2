"""``python -m tools.library_shot --out PATH``: docs/APP.md's screenshot of Models → Library….

Scans the library as the app does (``engine.library.scan_library`` with this process's
environment: ``HOME``, ``HF_HOME``, ``OLLAMA_MODELS``, ``LOGITSCOPE_CONFIG_DIR``…), shows the
rows in the dialog at ``--size`` with ``--select`` (a model's name) selected, and saves it.
docs/screenshots/library.png is the Mac-like home the tests build (``tests/support/library_home.py``)
with this environment pointed at it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.library_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--size", default="1100x520")
    p.add_argument("--select", default="", help="the name of the row to select (default: the first)")
    p.add_argument("--theme", default="light")
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.views.library_dialog import LibraryDialog
    from app.views.theme import apply_theme
    from engine.library import added_folders, scan_library

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app, args.theme)
    started = time.perf_counter()
    entries = scan_library()
    dialog = LibraryDialog()
    dialog.set_folders([str(folder) for folder in added_folders()])
    dialog.set_entries(entries, time.perf_counter() - started)
    width, height = (int(v) for v in args.size.lower().split("x"))
    dialog.resize(width, height)
    dialog.show()
    row = dialog.row_of(args.select) if args.select else 0
    if row >= 0:
        dialog.table.selectRow(row)
    for _ in range(5):
        app.processEvents()
    ok = dialog.grab().save(args.out)
    print(dialog.status.text())
    dialog.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
