"""Whether a model fits in memory now, estimated from its size on disk without importing MLX.

The rule (docs/ENGINE.md, ``models``): a model needs about its size on disk once loaded, a tenth
more when it is quantized (its scales are widened: ``engine.models.fit``); ``auto`` precision
widens half-precision weights to float32 only where that fits, so the size on disk is what it
needs at least. It fits when that is within the share of the machine's memory a model may use
(``engine.api.precision.MEMORY_SHARE`` of the physical memory, from ``os.sysconf``) and within what
is available now (psutil's ``available``, where psutil is installed).
"""

from __future__ import annotations

import os

from engine.api.precision import MEMORY_SHARE


def total_memory() -> int:
    """Physical memory in bytes (os.sysconf works on macOS and Linux); 0 when unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def available_memory() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError, AttributeError):
        return None


def needed_bytes(size_bytes: int, quantized: bool) -> int:
    return int(size_bytes * 1.1) if quantized else size_bytes


def fits(size_bytes: int, quantized: bool, total: int, available: int | None) -> bool | None:
    if total <= 0 or size_bytes <= 0:
        return None
    need = needed_bytes(size_bytes, quantized)
    return need <= MEMORY_SHARE * total and (available is None or need <= available)
