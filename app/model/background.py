"""Work the model hands off the GUI thread: serializing a finished reply's steps.

Serializing every token of a reply (its candidates through every stage) costs ~0.5 ms a
token in Python: done on the GUI thread when a long reply finishes, it would stall the
window. The model gives such work to a :class:`Background`: ``work`` runs elsewhere,
``then(result)`` back on the model's thread. :class:`RunNow` runs both at once (tests,
scripts); the app's runner is ``app.shell.background.QtBackground``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Background(Protocol):
    def __call__(self, work: Callable[[], Any], then: Callable[[Any], None]) -> None: ...

    def wait(self) -> None:
        """Finish every pending piece of work, ``then`` included."""


class RunNow:
    def __call__(self, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
        then(work())

    def wait(self) -> None:
        pass
