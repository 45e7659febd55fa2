"""What one server takes at most, each configurable (``python -m engine serve``'s flags, the
constructor's ``limits``) and each refused with a clear error in OpenAI's shape (no MLX).

A local server is still reachable by any program on the machine, and one that answers other
machines by any of them: without limits, one client could hold every socket with half a
request line (macOS gives a process 256), grow memory without bound with a huge body or an
endless queue, and stall every stream with a prompt the engine must tokenize.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request


@dataclass(frozen=True)
class ServeLimits:
    """The server's limits; each default is what a person's own clients never reach."""

    max_body_bytes: int = 8 * 1024 * 1024
    """A request body's size (413): 8 MiB holds a prompt filling a 1M-token context."""
    max_connections: int = 64
    """Connections, or requests being answered, at once (as uvicorn's ``limit_concurrency``
    counts; a 503 with ``Retry-After`` past it, ``engine.serve.listener``)."""
    max_queued: int = 32
    """Completion requests the server holds at once, being written or waiting for a row of
    the batch (429 with ``Retry-After`` past it)."""
    header_timeout_s: float = 10.0
    """Seconds a connection may take to send a request's line and headers (then closed)."""
    body_timeout_s: float = 30.0
    """Seconds a request may take to send its body (408)."""
    keep_alive_s: float = 5.0
    """Seconds an idle kept-alive connection stays open (uvicorn's ``timeout_keep_alive``)."""
    max_header_bytes: int = 16 * 1024
    """A request line and headers' size (h11's ``max_incomplete_event_size``: a 400 past it)."""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_connections", "max_queued", "max_header_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer ≥ 1, got {value!r}.")
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}.")


class LimitError(Exception):
    """A request past one of the limits: ``status`` and the message the client is sent."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def too_large(limit: int) -> LimitError:
    return LimitError(413, f"the request body is larger than this server takes ({limit:,} bytes).", "body_too_large")


async def read_body(request: Request, limits: ServeLimits) -> bytes:
    """The body of ``request``, refused (:class:`LimitError`) past ``limits.max_body_bytes``
    as its ``Content-Length`` says and as it arrives (a chunked body says nothing first),
    or when it takes longer than ``limits.body_timeout_s``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limits.max_body_bytes:
        raise too_large(limits.max_body_bytes)
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body_bytes:
                    raise too_large(limits.max_body_bytes)
                parts.append(chunk)
    except TimeoutError:
        raise LimitError(
            408, f"the request body did not arrive within {limits.body_timeout_s:g} s.", "body_timeout"
        ) from None
    except ClientDisconnect:
        raise LimitError(400, "the client closed the connection while sending the body.", "client_closed") from None
    return b"".join(parts)


__all__ = ["LimitError", "ServeLimits", "read_body"]
