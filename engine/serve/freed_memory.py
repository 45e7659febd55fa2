"""Memory a burst of requests freed, given back to the system once the server is idle.

glibc's allocator keeps what a thread freed in that thread's arena for its next allocation;
a server answers on many threads (uvicorn's, the thread pool's, the engine's), so after a
burst of large bodies, prompts and replies the process keeps their peak for good though
nothing holds it. ``malloc_trim`` returns the free pages of every arena. The bench's serving
soak (figure 28, the server in a process of its own) reads the resident memory after each
round of 21 clients: flat from round 2 on (+0.5 % to round 5, -0.2 % to round 9:
docs/BENCHMARKS-HISTORY.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable


@functools.cache
def _trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None  # macOS's allocator returns free pages itself
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


def give_back_freed_memory() -> bool:
    """Return the allocator's free pages to the system; whether it could (glibc only)."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
