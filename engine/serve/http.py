"""Logitscope's OpenAI-compatible HTTP server (Starlette, run by uvicorn): ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions``, streamed (server-sent events) or not.

A request is read whole and checked (``engine.serve.request_fields``) before anything reaches
the engine: a malformed body or a wrong field is a 400 in OpenAI's error shape naming the
field, and the server goes on serving. A stream whose client goes away cancels its request
at the engine's next step; a request that was not streamed is cancelled when its client
disconnects while it waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from engine.api.errors import EngineError
from engine.api.events import Event, Finished, TokenStep
from engine.api.params import SamplingParamsError
from engine.serve.request_fields import FieldError, ServedRequest, read_request
from engine.serve.responses import Reply, error_body
from engine.serve.seam import ServingEngine

DISCONNECT_POLL_S = 0.25


def _error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(error_body(message, param, kind), status_code=status)


def _unauthorized() -> JSONResponse:
    return _error(401, "a valid API key is needed (Authorization: Bearer KEY).", kind="authentication_error")


def _client(request: Request) -> str:
    """Who sent a request, in words: its address and the program it says it is."""
    parts = (request.client.host if request.client else "", request.headers.get("user-agent", ""))
    return " · ".join(p for p in parts if p)


def _sse(obj: dict[str, Any] | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n"


def make_app(engine: ServingEngine, api_key: str | None = None) -> Starlette:
    """The server's application over ``engine``; ``api_key``: the bearer token every request
    must carry (None: none is asked)."""

    def authorized(request: Request) -> bool:
        if api_key is None:
            return True
        given = request.headers.get("authorization", "")
        return secrets.compare_digest(given.encode("utf-8", "replace"), f"Bearer {api_key}".encode())

    async def models(request: Request) -> JSONResponse:
        if not authorized(request):
            return _unauthorized()
        entry = {"id": engine.info.name, "object": "model", "created": 0, "owned_by": "logitscope"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def completions(request: Request, chat: bool) -> Any:
        if not authorized(request):
            return _unauthorized()
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(400, f"the request body is not valid JSON: {exc}.")
        info = engine.info  # read per request: an app's model in use can change while it serves
        try:  # off the event loop: a large grammar takes a while to compile
            served = await run_in_threadpool(read_request, body, chat, info.context_length or 1_000_000)
        except FieldError as exc:
            return _error(400, str(exc), exc.param)
        served = dataclasses.replace(served, client=_client(request))
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()
        try:
            request_id = await asyncio.wrap_future(
                engine.submit(served, lambda e: loop.call_soon_threadsafe(events.put_nowait, e))
            )
        except (EngineError, SamplingParamsError) as exc:
            return _error(400, str(exc), getattr(exc, "field", None))
        except Exception as exc:  # noqa: BLE001 - a chat template's own error, ...: in OpenAI's shape
            return _error(500, f"{type(exc).__name__}: {exc}", kind="server_error")
        reply = Reply(
            f"{'chatcmpl' if chat else 'cmpl'}-{request_id}-{secrets.token_hex(4)}",
            served.model or info.name,
            chat,
            served.logprobs,
            served.post_sampling,
            served.llama_cpp_probs,
            engine.token_bytes,
            info.eos_token_ids,
        )
        if served.stream:
            return StreamingResponse(_stream(engine, request_id, served, reply, events), media_type="text/event-stream")
        return await _whole(engine, request, request_id, reply, events)

    async def chat(request: Request) -> Any:
        return await completions(request, chat=True)

    async def text(request: Request) -> Any:
        return await completions(request, chat=False)

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", text, methods=["POST"]),
    ]
    return Starlette(routes=routes)


async def _stream(
    engine: ServingEngine, request_id: int, served: ServedRequest, reply: Reply, events: asyncio.Queue
) -> AsyncIterator[str]:
    finished = False
    try:
        if reply.chat:
            yield _sse(reply.first_chunk())
        while True:
            event = await events.get()
            if isinstance(event, TokenStep):
                chunk = reply.add(event)
                if chunk is not None:
                    yield _sse(chunk)
            elif isinstance(event, Finished):
                finished = True
                if event.error:
                    yield _sse(error_body(event.error, kind="server_error"))
                yield _sse(reply.last_chunk(event))
                if served.include_usage:
                    yield _sse(reply.usage_chunk(event))
                yield _sse("[DONE]")
                return
    finally:
        if not finished:  # the client went away: the engine stops writing
            engine.cancel(request_id)


async def _whole(engine: ServingEngine, request: Request, request_id: int, reply: Reply, events: asyncio.Queue) -> Any:
    while True:
        try:
            event = await asyncio.wait_for(events.get(), DISCONNECT_POLL_S)
        except TimeoutError:
            if await request.is_disconnected():
                engine.cancel(request_id)
                return _error(499, "the client closed the connection.")
            continue
        if isinstance(event, TokenStep):
            reply.add(event)
        elif isinstance(event, Finished):
            if event.error:
                return _error(500, event.error, kind="server_error")
            return JSONResponse(reply.whole(event))
