"""The app's log file: uncaught exceptions (any thread), Qt's warnings, every error the
user is shown (model loads that failed, a server's errors) and the app's own notes, in
``platformdirs.user_log_dir("logitscope")/logitscope.log`` (``LOGITSCOPE_LOG_DIR`` overrides
the folder: tests, portable installs). Each start appends a header with the app's version,
Python, Qt, the platform and the model; Help → Show log opens it.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
import time
from importlib import metadata
from logging.handlers import RotatingFileHandler
from pathlib import Path

LOGGER = "logitscope"
log = logging.getLogger(LOGGER)
_installed: dict = {}


def log_path() -> Path:
    folder = os.environ.get("LOGITSCOPE_LOG_DIR")
    if not folder:
        import platformdirs

        folder = platformdirs.user_log_dir("logitscope")
    return Path(folder) / "logitscope.log"


def app_version() -> str:
    try:
        return metadata.version("logitscope")
    except metadata.PackageNotFoundError:
        return "unknown"


def header(model: str | None) -> str:
    try:
        from PySide6 import __version__ as pyside
    except ImportError:  # pragma: no cover
        pyside = "?"
    return (
        f"==== Logitscope {app_version()} started {time.strftime('%Y-%m-%d %H:%M:%S')} · "
        f"Python {platform.python_version()} · PySide6 {pyside} · {platform.platform()} · "
        f"model: {model or 'default'} · pid {os.getpid()}"
    )


def install(model: str | None = None) -> Path:
    """Open the log file and route uncaught exceptions and Qt messages to it (idempotent)."""
    path = log_path()
    if _installed.get("path") == path:
        return path
    uninstall()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(path, maxBytes=2_000_000, backupCount=2, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    handler.stream.write(header(model) + "\n")
    handler.flush()

    previous_hook, previous_thread_hook = sys.excepthook, threading.excepthook

    def excepthook(kind, value, tb):
        log.error("Uncaught exception", exc_info=(kind, value, tb))
        handler.flush()
        previous_hook(kind, value, tb)

    def thread_hook(args):
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread is not None else "?"
            log.error(
                "Uncaught exception in thread %s", name, exc_info=(args.exc_type, args.exc_value, args.exc_traceback)
            )
            handler.flush()
        previous_thread_hook(args)

    sys.excepthook, threading.excepthook = excepthook, thread_hook
    previous_qt = None
    try:
        from PySide6.QtCore import QtMsgType, qInstallMessageHandler

        levels = {
            QtMsgType.QtDebugMsg: logging.DEBUG,
            QtMsgType.QtInfoMsg: logging.INFO,
            QtMsgType.QtWarningMsg: logging.WARNING,
            QtMsgType.QtCriticalMsg: logging.ERROR,
            QtMsgType.QtFatalMsg: logging.CRITICAL,
        }

        def qt_handler(mode, context, message):
            log.log(max(levels.get(mode, logging.WARNING), logging.INFO), "Qt: %s", message)
            if mode != QtMsgType.QtDebugMsg:
                sys.stderr.write(f"{message}\n")

        previous_qt = qInstallMessageHandler(qt_handler)
    except ImportError:  # pragma: no cover
        pass
    _installed.update(path=path, handler=handler, hooks=(previous_hook, previous_thread_hook), qt=previous_qt)
    return path


def uninstall() -> None:
    """Undo :func:`install` (tests)."""
    if not _installed:
        return
    sys.excepthook, threading.excepthook = _installed["hooks"]
    try:
        from PySide6.QtCore import qInstallMessageHandler

        qInstallMessageHandler(_installed["qt"])
    except ImportError:  # pragma: no cover
        pass
    log.removeHandler(_installed["handler"])
    _installed["handler"].close()
    _installed.clear()


def note_model(name: str, source: str) -> None:
    if _installed:
        log.info("model loaded: %s (%s)", name, source)


def note_error(message: str, exc: BaseException | None = None) -> None:
    """An error the user is shown (a dialog, a dialog's own message): the same words in the
    log, one line (its line breaks folded), with the exception's traceback where it has one."""
    if not _installed:
        return
    words = " ".join(part.strip() for part in message.splitlines() if part.strip())
    trace = (type(exc), exc, exc.__traceback__) if exc is not None and exc.__traceback__ is not None else None
    log.error("%s", words, exc_info=trace)


def show_log(parent=None):
    """Help → Show log: the log's last 200 kB in a viewer, with a button to open its folder."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices, QFont
    from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout

    path = _installed.get("path") or log_path()
    handler = _installed.get("handler")
    if handler is not None:
        handler.flush()
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 200_000))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        text = "(no log written yet)"
    dialog = QDialog(parent)
    dialog.setWindowTitle("Logitscope log")
    dialog.resize(900, 560)
    layout = QVBoxLayout(dialog)
    label = QLabel(str(path))
    label.setTextInteractionFlags(label.textInteractionFlags() | label.textInteractionFlags().TextSelectableByMouse)
    layout.addWidget(label)
    view = QPlainTextEdit(text)
    view.setReadOnly(True)
    view.setFont(QFont("monospace"))
    view.moveCursor(view.textCursor().MoveOperation.End)
    layout.addWidget(view)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    folder = QPushButton("Open folder")
    folder.clicked.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(path).parent))))
    buttons.addButton(folder, QDialogButtonBox.ButtonRole.ActionRole)
    buttons.rejected.connect(dialog.reject)
    layout.addWidget(buttons)
    dialog.view, dialog.path = view, path
    dialog.open()
    return dialog
