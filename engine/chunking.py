"""How many prompt tokens one prefill chunk runs.

Prefill speed differs by two orders of magnitude between this machine's CPU backend
(about 8 tokens/s for the default model) and a GPU, so a fixed size is either slow to
cancel on the one or wasteful on the other. The sizer measures the prefill rate as it
goes and picks the largest power of two that should take about ``target`` seconds:
half a second while nothing else runs (throughput), a quarter while other rows are
decoding (so they are never held up for long), and a cancel lands between chunks.
"""

from __future__ import annotations

import mlx.core as mx

ALONE_SECONDS = 0.5
BUSY_SECONDS = 0.25
SMALLEST, LARGEST = 4, 2048


def first_size() -> int:
    """Before any measurement: small on a CPU, large on a GPU."""
    return 16 if mx.default_device() == mx.cpu else 512


class ChunkSizer:
    def __init__(self, fixed: int | None = None) -> None:
        self.fixed = fixed
        self.rate: float | None = None  # prompt tokens per second, smoothed

    def size(self, busy: bool) -> int:
        if self.fixed is not None:
            return self.fixed
        if self.rate is None:
            return first_size()
        wanted = self.rate * (BUSY_SECONDS if busy else ALONE_SECONDS)
        power = SMALLEST
        while power * 2 <= min(wanted, LARGEST):
            power *= 2
        return power

    def record(self, tokens: int, seconds: float) -> None:
        """One chunk's measured time (its forward pass, evaluated)."""
        if seconds <= 0 or tokens <= 0:
            return
        rate = tokens / seconds
        self.rate = rate if self.rate is None else 0.5 * self.rate + 0.5 * rate
