"""The engine thread's way to run work a piece at a time: a zero-timeout single-shot timer
whose slot runs one piece and starts it again while work is left, so every event queued
meanwhile (a cancel, a parameter change) is handled between two pieces. The worker's decode
steps, its scored texts and the analyses' runners each hold one."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer


def step_timer(parent: QObject, step: Callable[[], None]) -> QTimer:
    """A zero-timeout single-shot timer of ``parent`` (make it on the thread that will start
    it) calling ``step``."""
    timer = QTimer(parent)
    timer.setSingleShot(True)
    timer.setInterval(0)
    timer.timeout.connect(step)
    return timer
