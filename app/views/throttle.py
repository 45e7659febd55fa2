"""Capped-rate redraws: one ~30 Hz clock for every view (pyqtgraph's examples: one QTimer
calls ``setData`` per tick), with superqt ``qthrottled``'s leading edge.

A view makes a :class:`Throttler` for its redraw and calls ``request()`` on every model
event. The first request after a quiet interval runs at once (a click answers
immediately); later ones within ``REDRAW_MS`` wait for the clock's next tick, which runs
each pending redraw once (a stream of 200 tokens a second redraws ~30 times a second).
The clock only ticks while something is pending. Redraws slower than the clock (the
inspector's and the timeline's, 10 a second) run on ticks, at most one of them per tick,
so their costs never add up between two ticks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

REDRAW_MS = 33


class RedrawClock(QObject):
    def __init__(self, parent: QObject | None = None, now: Callable[[], float] = time.monotonic) -> None:
        """``now``: seconds, for the intervals (tests pass a fixed clock to count redraws)."""
        super().__init__(parent)
        self.now = now
        self.throttlers: list[Throttler] = []
        self.timer = QTimer(self)
        self.timer.setInterval(REDRAW_MS)
        self.timer.timeout.connect(self.tick)

    def throttler(self, fn: Callable[[], None], interval_ms: int = REDRAW_MS) -> Throttler:
        """``interval_ms``: the least time between two runs (a multiple of the clock's tick)."""
        throttler = Throttler(fn, self, interval_ms)
        self.throttlers.append(throttler)
        return throttler

    def tick(self) -> None:
        """Run the pending redraws whose interval has passed, but at most one of the slower
        ones (the one waiting longest), so two heavy redraws never share a tick; the clock
        stops when none is left."""
        slow = [t for t in self.throttlers if t.pending and t.due() and not t.fast]
        for throttler in self.throttlers:
            if throttler.fast and throttler.due():
                throttler.flush()
        if slow:
            min(slow, key=lambda t: t.last).flush()
        if not any(t.pending for t in self.throttlers):
            self.timer.stop()

    def flush(self) -> None:
        """Run every pending redraw now (tests, screenshots)."""
        for throttler in self.throttlers:
            throttler.flush()
        self.timer.stop()


class Throttler:
    def __init__(self, fn: Callable[[], None], clock: RedrawClock, interval_ms: int = REDRAW_MS) -> None:
        self._fn = fn
        self._clock = clock
        self.interval = interval_ms / 1000
        self.fast = interval_ms <= REDRAW_MS
        self.pending = False
        self.runs = 0
        self.last = -math.inf

    def request(self, urgent: bool = False) -> None:
        """Redraw now if the last run is older than the interval (or ``urgent``: a click),
        else at the clock's next tick. A slower redraw runs on a tick only (unless urgent),
        where the clock spreads them out."""
        if urgent or (self.fast and self.due()):
            self._run()
            return
        self.pending = True
        if not self._clock.timer.isActive():
            self._clock.timer.start()

    def due(self) -> bool:
        # A tick comes a little early or late: "due" allows for a quarter of a tick.
        return self._clock.now() - self.last >= self.interval - REDRAW_MS / 4000

    def flush(self) -> None:
        if self.pending:
            self._run()

    def _run(self) -> None:
        self.pending = False
        self.runs += 1
        self.last = self._clock.now()
        self._fn()


def own_clock(view: QObject, clock: RedrawClock | None) -> RedrawClock:
    """The clock a view redraws on: the window's, or one of its own when used alone."""
    return clock if clock is not None else RedrawClock(view)
