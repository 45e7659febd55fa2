"""What keeps a server without an API key to this machine's own clients, and every error of
the server in OpenAI's shape (no MLX).

A server on 127.0.0.1 is reachable by every web page the user opens. A cross-origin POST
whose ``Content-Type`` is ``text/plain`` is a "simple request" a browser sends with no CORS
preflight, and a DNS-rebinding page reaches 127.0.0.1 under its own ``Host`` and can read the
reply (Ollama's CVE-2024-28224). So without a key, :class:`LocalOnly` takes only
``application/json`` bodies (415 otherwise) and only a ``Host`` naming a loopback address or
the bound one (421 otherwise), and answers a CORS preflight without granting any origin. A
server with a key is reached on purpose, from anywhere that has the key: it is left as it is.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.serve.address import is_local
from engine.serve.responses import error_body

ALLOWED_METHODS = "GET, POST, OPTIONS"


def error_response(
    status: int,
    message: str,
    param: str | None = None,
    kind: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An HTTP error in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse(error_body(message, param, kind, code), status_code=status, headers=headers)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port: ``[::1]:8080`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    if header.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        return header.split(":", 1)[0]
    return header


def host_allowed(header: str | None, bound: str) -> bool:
    """Whether a request's ``Host`` names this machine's loopback or the address the server
    is bound to (no ``Host`` at all: HTTP/1.0, which no browser sends)."""
    if header is None:
        return True
    name = host_name(header)
    return is_local(name) or name == bound.strip("[]").lower()


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` says JSON (``application/json``, parameters allowed)."""
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


class LocalOnly:
    """ASGI middleware for a server without an API key (see the module's docstring);
    ``bound``: the address the server listens on."""

    def __init__(self, app: ASGIApp, bound: str) -> None:
        self.app = app
        self.bound = bound

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self.refusal(scope["method"], headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, method: str, headers: Headers) -> Response | None:
        if not host_allowed(headers.get("host"), self.bound):
            return error_response(
                421,
                f"this server answers requests to this machine only, not to Host {headers.get('host')!r}; "
                "start it with an API key to serve other names.",
                kind="invalid_request_error",
                code="misdirected_request",
            )
        if method == "OPTIONS":
            # A preflight is answered, granting nothing: no Access-Control-Allow-Origin, so a
            # browser refuses the page's request.
            return Response(status_code=204, headers={"Allow": ALLOWED_METHODS})
        if method == "POST" and not is_json(headers.get("content-type")):
            return error_response(
                415,
                f"the body must be sent as Content-Type: application/json, got {headers.get('content-type')!r}.",
                code="unsupported_media_type",
            )
        return None


def _status_kind(status: int) -> str:
    return "server_error" if status >= 500 else "invalid_request_error"


async def http_error(request: Any, exc: Any) -> JSONResponse:
    """Starlette's own errors (404, 405, ...) in OpenAI's shape."""
    status = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", "") or "error"
    headers = getattr(exc, "headers", None)
    message = {404: f"no such endpoint: {request.url.path}.", 405: f"{request.method} is not allowed here."}
    return error_response(status, message.get(status, str(detail)), kind=_status_kind(status), headers=headers)


async def server_error(request: Any, exc: Exception) -> JSONResponse:
    """An error no handler took: a 500 in OpenAI's shape (the server goes on)."""
    return error_response(500, f"{type(exc).__name__}: {exc}", kind="server_error")


__all__ = ["LocalOnly", "error_response", "host_allowed", "http_error", "is_json", "server_error"]
