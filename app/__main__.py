"""``python -m app`` / ``logitscope``: the desktop app.

``--send TEXT`` starts normally and sends TEXT once the model has loaded; ``--selftest``
(the packaged app's check) and ``--startup-report PATH`` (bench figure 15) are the shipped
app's own modes (``app/shell/startup/selftest.py``, ``app/shell/startup/startup_report.py``); ``python -m
app export`` exports without Qt (``app/store/export_cli.py``). The README's screenshots are
made by ``python -m tools.screenshot``, which is not shipped.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before anything heavy: the start-up report counts from here

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="logitscope")
    parser.add_argument("--model", default=None, help="default | PATH | REPO")
    parser.add_argument("--theme", choices=["system", "light", "dark"], default=None)
    parser.add_argument(
        "--send",
        metavar="TEXT",
        default=None,
        help="start normally (the real database and settings) and send TEXT as if typed, once the model has loaded",
    )
    parser.add_argument("--selftest", action="store_true", help="load the default model, generate, report, exit")
    parser.add_argument("--timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    parser.add_argument("--startup-report", metavar="PATH", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export"]:  # python -m app export ...: no window, no Qt
        from app.store.export_cli import main as export_main

        return export_main(argv[1:])
    args = parse_args(argv)
    if args.selftest:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.shell.window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Logitscope")
    app.setOrganizationName("Logitscope")
    from app.views.resources import app_icon

    app.setWindowIcon(app_icon())
    if args.selftest:
        from app.shell.startup.selftest import run_selftest

        return run_selftest(app, args.model or "default", args.timeout)
    from PySide6.QtCore import QSettings

    from app.shell.startup.db_open import StoreUnavailable
    from app.shell.startup.logging_setup import install

    install(args.model or str(QSettings("Logitscope", "Logitscope").value("model", "default")))
    marks = {"python_ready": STARTED, "qt_imported": time.time()}
    try:
        window = MainWindow(model=args.model)
    except StoreUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    marks["window_built"] = time.time()
    if args.theme:
        window.set_theme(args.theme)
    window.show()
    marks["window_shown"] = time.time()
    keep = []  # what runs beside the window until the app quits
    if args.startup_report:
        from app.shell.startup.startup_report import StartupReport, launched_at

        keep.append(StartupReport(window, window.engine.worker, args.startup_report, launched_at(STARTED), marks))
    if args.send:
        keep.append(send_when_loaded(window, args.send))
    settle_memory()
    return app.exec()


def send_when_loaded(window, text: str):
    """``--send``: type ``text`` into the composer and send it once the model has loaded."""
    from PySide6.QtCore import QTimer

    timer = QTimer(window)
    timer.setInterval(50)

    def poll() -> None:
        if window.last_error and window.model_info is None:
            timer.stop()
        elif window.model_info is not None:
            timer.stop()
            window.composer.setPlainText(text)
            window.send()

    timer.timeout.connect(poll)
    timer.start()
    return timer


def settle_memory() -> None:
    """Once the window is up: collect, then keep the objects made so far (Qt, pyqtgraph,
    the open conversation) out of later full collections, so that one never stalls a reply
    being drawn (a full collection of them takes ~0.2 s here; Python's ``gc.freeze``)."""
    import gc

    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
