"""How many prompt tokens one prefill chunk runs.

Prefill speed differs by two orders of magnitude between this machine's CPU backend
(about 8 tokens/s for the default model) and a GPU, so a fixed size is either slow to
cancel on the one or wasteful on the other. The sizer measures the prefill rate as it
goes and picks the largest power of two that should take about ``target`` seconds:
0.3 s while nothing else runs, a quarter while other rows are decoding (so they are
never held up for long), and a cancel lands between chunks.

A token costs more the longer the context before it (attention reads every earlier
position), so the rate falls as a long prompt is read. An average of past rates lags
behind that fall: on a 20,000-token prompt of the tiny model it chose 2,048-token chunks
that took a second each, and Esc waited for them (issue 11). So a slower measurement is
believed at once and a faster one only halfway, a chunk is at most twice the last one,
and the target leaves room for a machine busy with other work: Esc acts within a second.
"""

from __future__ import annotations

import mlx.core as mx

ALONE_SECONDS = 0.3
BUSY_SECONDS = 0.25
SMALLEST, LARGEST = 4, 2048
GROWTH = 2  # a chunk is at most this many times the last measured one


def first_size() -> int:
    """Before any measurement: small on a CPU, large on a GPU."""
    return 16 if mx.default_device() == mx.cpu else 512


class ChunkSizer:
    def __init__(self, fixed: int | None = None) -> None:
        self.fixed = fixed
        self.rate: float | None = None  # prompt tokens per second, smoothed
        self.last = 0  # the size of the last measured chunk

    def size(self, busy: bool) -> int:
        if self.fixed is not None:
            return self.fixed
        if self.rate is None:
            return first_size()
        wanted = min(self.rate * (BUSY_SECONDS if busy else ALONE_SECONDS), GROWTH * self.last, LARGEST)
        power = SMALLEST
        while power * 2 <= wanted:
            power *= 2
        return power

    def record(self, tokens: int, seconds: float) -> None:
        """One chunk's measured time (its forward pass, evaluated)."""
        if seconds <= 0 or tokens <= 0:
            return
        rate = tokens / seconds
        # Slower: believed at once (the context grew); faster: halfway (it may be noise).
        self.rate = rate if self.rate is None else min(rate, 0.5 * self.rate + 0.5 * rate)
        self.last = tokens
