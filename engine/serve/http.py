"""Logitscope's OpenAI-compatible HTTP server (Starlette, run by uvicorn): ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions``, streamed (server-sent events) or not.

A request is read (within ``engine.serve.limits.ServeLimits``) and checked
(``engine.serve.request_fields``) before anything reaches the engine: a malformed body or a
wrong field is a 400 in OpenAI's error shape naming the field, and the server goes on
serving. Without an API key only this machine's own clients are answered
(``engine.serve.guard.LocalOnly``). The prompt is tokenized and a grammar compiled on the
server's threads (``ServingEngine.prepare``), not on the engine's. A stream whose client goes
away cancels its request at the engine's next step; a request that was not streamed is
cancelled when its client disconnects while it waits. A reply that ends in an error or a
cancel (the server stopped) ends as OpenAI's servers end one: a stream with an error event
``data: {"error": {...}}`` and no closing chunk, a whole response with an error status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from engine.api.errors import EngineError
from engine.api.events import Finished, FinishReason, TokenStep
from engine.api.params import SamplingParamsError
from engine.serve import choices
from engine.serve.guard import LocalOnly, error_response, http_error, server_error
from engine.serve.limits import LimitError, ServeLimits, read_body
from engine.serve.request_fields import FieldError, ServedRequest, read_request
from engine.serve.responses import Reply, error_body
from engine.serve.seam import Refused, ServingEngine

DISCONNECT_POLL_S = 0.25
RETRY_AFTER_S = 1
STOPPED = object()
"""Put in a request's queue when the server stops: its reply ends with an error."""
STOPPED_MESSAGE = "the server stopped before the reply was finished."
CANCELLED_MESSAGE = "the reply was cancelled by the server before it was finished."


def _unauthorized() -> JSONResponse:
    return error_response(401, "a valid API key is needed (Authorization: Bearer KEY).", kind="authentication_error")


def _client(request: Request) -> str:
    """Who sent a request, in words: its address and the program it says it is."""
    parts = (request.client.host if request.client else "", request.headers.get("user-agent", ""))
    return " · ".join(p for p in parts if p)


def _sse(obj: dict[str, Any] | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n"


class LiveRequests:
    """The completion requests the server holds (each one's event queue), on the server's
    event loop: bounded by ``limit`` (``ServeLimits.max_queued``), and ended at a stop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queues: dict[int, asyncio.Queue] = {}
        self.stopping = False
        self._places = itertools.count()

    def take(self) -> int:
        """A new request's place (its queue), counted from now until :meth:`release`."""
        place = next(self._places)
        self.queues[place] = asyncio.Queue()
        return place

    def release(self, place: int) -> None:
        self.queues.pop(place, None)

    def full(self) -> bool:
        return len(self.queues) >= self.limit

    def stop_all(self) -> None:
        """The server stops: every held request's reply ends with an error (on the loop)."""
        self.stopping = True
        for events in self.queues.values():
            events.put_nowait(STOPPED)


def _ended_early(event: Finished | object) -> tuple[str, str] | None:
    """(message, code) of a reply that did not finish (an error, a cancel, the server's stop);
    None for a finished one."""
    if event is STOPPED:
        return STOPPED_MESSAGE, "server_stopped"
    assert isinstance(event, Finished)
    if event.finish_reason == FinishReason.ERROR:
        return event.error or "the engine failed.", "engine_error"
    if event.finish_reason == FinishReason.CANCELLED:
        return CANCELLED_MESSAGE, "cancelled"
    return None


def make_app(
    engine: ServingEngine,
    api_key: str | None = None,
    limits: ServeLimits | None = None,
    bound: str = "127.0.0.1",
    on_refused: Callable[[Refused], object] | None = None,
) -> Starlette:
    """The server's application over ``engine``; ``api_key``: the bearer token every request
    must carry (None: none is asked, and only this machine's clients are answered);
    ``limits``: what it takes at most; ``bound``: the address it listens on (a ``Host`` it
    answers besides the loopback names); ``on_refused``: told of each completion request
    refused with a 400 before it reached ``engine.submit`` (a body that is not JSON, a wrong
    field), on the server's event loop (the app lists it). ``app.state.live`` is its
    :class:`LiveRequests` (``stop_all`` on a stop)."""
    limits = limits or ServeLimits()
    live = LiveRequests(limits.max_queued)

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
        if live.stopping:
            return error_response(503, STOPPED_MESSAGE, kind="server_error", code="server_stopped")
        if live.full():
            return error_response(
                429,
                f"the server holds {live.limit} requests already; try again shortly.",
                kind="requests",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        place = live.take()  # counted from here: reading and preparing it take a while too
        handed_over = False
        seen: dict[str, Any] = {}
        try:
            answer = await _start(request, chat, live.queues[place], seen)
            if isinstance(answer, _Started | _Many):
                handed_over = True  # its answer releases its place when it ends
                return await answer.respond(lambda: live.release(place))
            if on_refused is not None and answer.status_code == 400 and "submitted" not in seen:
                error = json.loads(answer.body)["error"]
                on_refused(Refused(_client(request), chat, seen.get("body"), error["message"], error.get("param")))
            return answer
        finally:
            if not handed_over:
                live.release(place)

    async def _start(request: Request, chat: bool, events: asyncio.Queue, seen: dict[str, Any]) -> Any:
        try:
            raw = await read_body(request, limits)
        except LimitError as exc:  # the rest of the body is not read: the connection cannot go on
            return error_response(exc.status, str(exc), code=exc.code, headers={"Connection": "close"})
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_response(400, f"the request body is not valid JSON: {exc}.")
        except RecursionError:
            return error_response(400, "the request body is not valid JSON: it is nested too deeply.")
        seen["body"] = body
        info = engine.info  # read per request: an app's model in use can change while it serves
        try:  # off the event loop and the engine's thread: templating, tokenizing, a grammar
            served = await run_in_threadpool(read_request, body, chat, info.context_length or 1_000_000)
            served = await run_in_threadpool(engine.prepare, served)
        except FieldError as exc:
            return error_response(400, str(exc), exc.param)
        except (EngineError, SamplingParamsError) as exc:
            return error_response(400, str(exc), getattr(exc, "field", None))
        served = dataclasses.replace(served, client=_client(request))
        if not served.single:  # several prompts or choices, token ids, echo: answered whole
            try:
                choices.check_engine(engine, served)
                prepared = await run_in_threadpool(choices.prepare, engine, served, engine.token_bytes)
            except FieldError as exc:
                return error_response(400, str(exc), exc.param)
            except (EngineError, SamplingParamsError) as exc:
                return error_response(400, str(exc), getattr(exc, "field", None))
            return _Many(engine, request, prepared, served.model or info.name, info.eos_token_ids)
        loop = asyncio.get_running_loop()
        seen["submitted"] = True  # a refusal from here on is the engine's own, which it knows of
        try:
            request_id = await asyncio.wrap_future(
                engine.submit(served, lambda e: loop.call_soon_threadsafe(events.put_nowait, e))
            )
        except (EngineError, SamplingParamsError) as exc:
            return error_response(400, str(exc), getattr(exc, "field", None))
        except Exception as exc:  # noqa: BLE001 - a chat template's own error, ...: in OpenAI's shape
            return error_response(500, f"{type(exc).__name__}: {exc}", kind="server_error")
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
        return _Started(engine, request, request_id, served, reply, events)

    async def chat(request: Request) -> Any:
        return await completions(request, chat=True)

    async def text(request: Request) -> Any:
        return await completions(request, chat=False)

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", text, methods=["POST"]),
    ]
    middleware = [] if api_key is not None else [Middleware(LocalOnly, bound=bound)]
    handlers = {HTTPException: http_error, Exception: server_error}
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)  # type: ignore[arg-type]
    app.state.live = live
    return app


@dataclasses.dataclass
class _Started:
    """A request the engine took: its answer, streamed or whole."""

    engine: ServingEngine
    request: Request
    request_id: int
    served: ServedRequest
    reply: Reply
    events: asyncio.Queue

    async def respond(self, release: Callable[[], object]) -> Any:
        """The response; ``release`` frees the request's place when its answer ends."""
        if self.served.stream:
            return StreamingResponse(self._stream(release), media_type="text/event-stream")
        return await self._whole(release)

    async def _stream(self, release: Callable[[], object]) -> AsyncIterator[str]:
        finished = False
        reply = self.reply
        try:
            if reply.chat:
                yield _sse(reply.first_chunk())
            while True:
                event = await self.events.get()
                if isinstance(event, TokenStep):
                    chunk = reply.add(event)
                    if chunk is not None:
                        yield _sse(chunk)
                    continue
                if not isinstance(event, Finished) and event is not STOPPED:
                    continue
                finished = isinstance(event, Finished)
                early = _ended_early(event)
                if early is not None:  # OpenAI's and llama.cpp's way: the error, no closing chunk
                    yield _sse(error_body(early[0], kind="server_error", code=early[1]))
                    return
                assert isinstance(event, Finished)
                yield _sse(reply.last_chunk(event))
                if self.served.include_usage:
                    yield _sse(reply.usage_chunk(event))
                yield _sse("[DONE]")
                return
        finally:
            release()
            if not finished:  # the client went away, or the server stops: the engine stops writing
                self.engine.cancel(self.request_id)

    async def _whole(self, release: Callable[[], object]) -> Any:
        try:
            while True:
                try:
                    event = await asyncio.wait_for(self.events.get(), DISCONNECT_POLL_S)
                except TimeoutError:
                    if await self.request.is_disconnected():
                        self.engine.cancel(self.request_id)
                        return error_response(499, "the client closed the connection.")
                    continue
                if isinstance(event, TokenStep):
                    self.reply.add(event)
                elif isinstance(event, Finished) or event is STOPPED:
                    early = _ended_early(event)
                    if event is STOPPED:
                        self.engine.cancel(self.request_id)
                    if early is not None:
                        status = 500 if early[1] == "engine_error" else 503
                        return error_response(status, early[0], kind="server_error", code=early[1])
                    return JSONResponse(self.reply.whole(event))  # type: ignore[arg-type]
        finally:
            release()


@dataclasses.dataclass
class _Many:
    """A completions request of several prompts or choices, token ids or ``echo``
    (``engine.serve.choices``): answered whole once every part ended."""

    engine: ServingEngine
    request: Request
    prepared: choices.Prepared
    model: str
    eos: tuple[int, ...]

    async def respond(self, release: Callable[[], object]) -> Any:
        try:
            try:
                got = await choices.run(self.engine, self.prepared, self.request.is_disconnected, DISCONNECT_POLL_S)
            except choices.Failed as exc:
                status = {"client_closed": 499, "engine_error": 500}.get(exc.code, 503)
                return error_response(status, str(exc), kind="server_error", code=exc.code)
            except (EngineError, SamplingParamsError) as exc:  # the engine refused a part
                return error_response(400, str(exc), getattr(exc, "field", None))
            ident = f"cmpl-{secrets.token_hex(8)}"

            def frame(listed: list[dict[str, Any]]) -> dict[str, Any]:
                return {
                    "id": ident,
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": self.model,
                    "choices": listed,
                }

            body = choices.answer(self.prepared, got, self.engine.token_bytes, self.eos, frame)
            return JSONResponse(body)
        finally:
            release()
