"""How a bench stops instead of hanging: one error type that says why, a wait on the app's
window that ends on the worker's error or a time limit, and a check that a stand-in session
still has the real session's calls.

A bench that drives the real window waits on the worker thread (a model load, a reply). The
worker reports a failure by signal, and the window shows it (``MainWindow.last_error``); a
bench that only waited for success would wait forever. :func:`wait_for` watches both, and
:class:`BenchError` carries the one line ``python -m bench`` prints before exiting non-zero.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

LOAD_LIMIT_S = 600.0
"""A real model's load: the default model converts in seconds, a large one on a slow disk in minutes."""


class BenchError(RuntimeError):
    """A figure cannot run: the message says why, in one line (no traceback is printed)."""


def one_line(text: str) -> str:
    return " ".join(text.split())


def wait_for(window: Any, done: Callable[[], bool], what: str, limit_s: float) -> None:
    """Run the GUI's event loop until ``done()``; a :class:`BenchError` naming ``what`` as
    soon as the window shows an error (every worker failure ends there: a load, a rejected
    job, a failed step) or once ``limit_s`` seconds have passed.

    The loop is a real ``QEventLoop`` polled by a 5 ms timer, not ``processEvents`` in a
    sleep loop, so timers on the GUI thread tick as they do in the app while a bench measures.
    """
    from PySide6.QtCore import QEventLoop, QTimer

    failure: list[str] = []
    deadline = time.perf_counter() + limit_s
    loop = QEventLoop()

    def poll() -> None:
        if window.last_error:
            failure.append(f"{what}: the app reported: {one_line(window.last_error)}")
        elif time.perf_counter() > deadline:
            failure.append(f"{what}: not done after {limit_s:.0f} s")
        elif not done():
            return
        loop.quit()

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(poll)
    timer.start()
    loop.exec()  # the first poll comes 5 ms in: a loop quit before it runs would not end it
    timer.stop()
    if failure:
        raise BenchError(failure[0])


def drifted(standin: type, real: type) -> list[str]:
    """The calls ``standin`` defines itself whose signature differs from ``real``'s (names,
    kinds and defaults of the parameters), as ``"name: stand-in (...) vs real (...)"``.

    A stand-in session derives from the real one, so a call added to the real one is
    inherited; what can drift is a call it overrides, as ``load`` did when the precision and
    KV-cache arguments were added (the worker's call then raised and the bench waited)."""
    found = []
    for name, member in vars(standin).items():
        if name.startswith("__") or isinstance(member, property) or not callable(member):
            continue
        theirs = inspect.getattr_static(real, name, None)
        if theirs is None or isinstance(theirs, property) or not callable(theirs):
            continue  # the stand-in's own helper
        ours_sig, their_sig = _signature(member), _signature(theirs)
        if ours_sig != their_sig:
            found.append(f"{name}: stand-in {ours_sig} vs real {their_sig}")
    return found


def _signature(member: Any) -> str:
    function = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
    parameters = list(inspect.signature(function).parameters.values())
    if not isinstance(member, staticmethod):
        parameters = parameters[1:]  # self or cls: a staticmethod and a method are the same call
    # Annotations are left out: they are strings here (postponed), written differently in each file.
    return "(" + ", ".join(str(p.replace(annotation=inspect.Parameter.empty)) for p in parameters) + ")"
