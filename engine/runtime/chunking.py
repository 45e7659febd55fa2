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
that took a second each, and Esc waited for them. So a slower measurement is
believed at once and a faster one only halfway, a chunk is at most twice the last one,
and the target leaves room for a machine busy with other work: Esc acts within a second.

A GPU reads a prompt far faster than a cancel needs to wait for, and cutting it into
pieces costs launches (the H100 prefilled a 1,000-token prompt at 0.40 of mlx-lm's rate in
adaptive chunks): there, with nothing else running, a chunk is mlx-lm's own prefill step
(``LARGEST``, whole prompts up to it), unless the measured rate says that would take more
than ``GPU_ALONE_SECONDS``. A chunk of a size not run before is not believed once the rate
is known: its time includes building and compiling that shape's graph (the first chunk
of a process took 10 times a warm one), so it only seeds the rate until a warm one arrives.
"""

from __future__ import annotations

import mlx.core as mx

ALONE_SECONDS = 0.3
BUSY_SECONDS = 0.25
GPU_ALONE_SECONDS = 1.0
SMALLEST, LARGEST = 4, 2048  # LARGEST: mlx-lm's prefill_step_size
FIRST_CPU, FIRST_GPU_BUSY = 16, 512  # before any measurement
GROWTH = 2  # a chunk is at most this many times the last measured one


def on_gpu() -> bool:
    return mx.default_device() != mx.cpu


def first_size() -> int:
    """Before any measurement: small on a CPU, mlx-lm's prefill step on a GPU."""
    return LARGEST if on_gpu() else FIRST_CPU


class ChunkSizer:
    """Chunk sizes for one model on this device. ``gpu``: whether the device is a GPU
    (default: MLX's default device)."""

    def __init__(self, fixed: int | None = None, gpu: bool | None = None) -> None:
        self.fixed = fixed
        self.gpu = on_gpu() if gpu is None else gpu
        self.rate: float | None = None  # prompt tokens per second, smoothed
        self.warm = False  # whether ``rate`` comes from a chunk of a size run before
        self.last = 0  # the size of the last measured chunk
        self._sizes: set[int] = set()  # chunk sizes run before (their graphs are built)

    def size(self, busy: bool) -> int:
        if self.fixed is not None:
            return self.fixed
        if self.gpu and not busy:
            if self.rate is None or not self.warm or self.rate * GPU_ALONE_SECONDS >= LARGEST:
                return LARGEST
            return self._power(self.rate * GPU_ALONE_SECONDS)
        if self.rate is None:
            return FIRST_GPU_BUSY if self.gpu else FIRST_CPU
        return self._power(min(self.rate * (BUSY_SECONDS if busy else ALONE_SECONDS), GROWTH * self.last))

    @staticmethod
    def _power(wanted: float) -> int:
        power = SMALLEST
        while power * 2 <= min(wanted, LARGEST):
            power *= 2
        return power

    def record(self, tokens: int, seconds: float) -> None:
        """One chunk's measured time (its forward pass, evaluated)."""
        if seconds <= 0 or tokens <= 0:
            return
        rate = tokens / seconds
        warm = tokens in self._sizes
        self._sizes.add(tokens)
        self.last = tokens
        if not warm and self.warm:
            return  # a new shape's first run: its graph building is not the rate
        if warm and not self.warm:
            self.rate, self.warm = rate, True  # the first warm measurement replaces the cold seed
            return
        # Slower: believed at once (the context grew); faster: halfway (it may be noise).
        self.rate = rate if self.rate is None else min(rate, 0.5 * self.rate + 0.5 * rate)
