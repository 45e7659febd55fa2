"""The HTTP side of the remote backend: one asyncio loop on its own thread, one
``httpx.AsyncClient``, one task per running request.

The backend's thread submits a :class:`Job` and later reads what came back from a
queue; it never waits on the network. Cancelling a job cancels its task, which closes
its response and so its connection: a streaming server stops generating at its next
write. Connection attempts are retried (``httpx.AsyncHTTPTransport(retries=...)``
retries connect errors only); nothing else is, since a request that reached the server
may have been half generated.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from engine.remote.chosen import chosen_from_text
from engine.remote.pieces import keep_first
from engine.remote.wire import (
    RemoteError,
    WireChunk,
    WireEntry,
    keepalive_progress,
    parse_chunk,
    server_message,
    sse_data,
)


@dataclass(frozen=True, slots=True)
class Job:
    request_id: int
    generation: int
    """Bumped on every restart of a request; messages of older generations are dropped."""
    path: str
    body: Mapping[str, Any]
    stream: bool
    vocab_pieces: bool = False
    """mlx_lm.server: tokens are raw vocabulary strings."""
    read_chosen: int | None = None
    """mlx_lm.server, sampled: the chosen tokens are read from the reply's text among its
    top lists (``engine.remote.chosen``), each list cut to this many candidates; None:
    greedy, the chosen token is each list's most likely."""
    keep: int | None = None
    """A piece of a reply (``engine.remote.pieces``): the tokens kept of the ``keep + 1``
    asked for; None: the whole reply."""


# What a job puts on the queue: (kind, request_id, generation, payload).
CHUNK, PROGRESS, DONE, ERROR = "chunk", "progress", "done", "error"


class Transport:
    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float,
        connect_timeout: float,
        retries: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.out: queue.SimpleQueue[tuple[str, int, int, Any]] = queue.SimpleQueue()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="remote-http", daemon=True)
        self._thread.start()
        limits = httpx.Timeout(timeout, connect=connect_timeout)
        make = transport or httpx.AsyncHTTPTransport(retries=retries)
        self._client: httpx.AsyncClient = self._call(self._make_client(dict(headers), limits, make))

    @staticmethod
    async def _make_client(headers: dict[str, str], timeout: httpx.Timeout, transport) -> httpx.AsyncClient:
        return httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport)

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def get(self, path: str) -> tuple[int, httpx.Headers, bytes]:
        """GET ``path`` and wait for it (used while connecting, not while generating): its
        status, headers and body, whatever the status; raises only when nothing answered."""
        try:
            return self._call(self._get(path))
        except httpx.HTTPError as exc:
            raise _network_error(exc, self.base_url, self.timeout) from None

    async def _get(self, path: str) -> tuple[int, httpx.Headers, bytes]:
        resp = await self._client.get(self.base_url + path)
        return resp.status_code, resp.headers, await resp.aread()

    def get_json(self, path: str) -> Any | None:
        """The JSON ``path`` answers with; None for an error status or no JSON."""
        status, _, body = self.get(path)
        if status >= 400:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def submit(self, job: Job) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(self._run(job), self._loop)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._client.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def _put(self, kind: str, job: Job, payload: Any) -> None:
        self.out.put((kind, job.request_id, job.generation, payload))

    async def _run(self, job: Job) -> None:
        try:
            if job.stream:
                await self._stream(job)
            else:
                await self._whole(job)
        except asyncio.CancelledError:
            raise
        except RemoteError as exc:
            self._put(ERROR, job, exc)
        except httpx.HTTPError as exc:
            self._put(ERROR, job, _network_error(exc, self.base_url, self.timeout))
        except Exception as exc:  # anything else still ends the request cleanly
            self._put(ERROR, job, RemoteError(f"remote request failed: {type(exc).__name__}: {exc}"))

    async def _stream(self, job: Job) -> None:
        finish: str | None = None
        usage = None
        async with self._client.stream("POST", self.base_url + job.path, json=dict(job.body)) as resp:
            await _check_status(resp)
            async for line in resp.aiter_lines():
                progress = keepalive_progress(line)
                if progress is not None:
                    self._put(PROGRESS, job, progress)
                    continue
                data = sse_data(line)
                if not data:
                    continue
                if data == "[DONE]":
                    break
                try:
                    obj = json.loads(data)
                except ValueError:
                    raise RemoteError(f"the server sent an unreadable chunk: {data[:200]!r}") from None
                if not isinstance(obj, Mapping):
                    continue
                if obj.get("error") and not obj.get("choices"):
                    msg = server_message(data.encode())
                    raise RemoteError(f"the server reported an error mid-reply: {msg}", server_message=msg)
                chunk = parse_chunk(obj, job.vocab_pieces)
                if chunk.text and not chunk.has_logprobs:
                    raise _no_logprobs()
                usage = chunk.usage or usage
                if chunk.entries:
                    self._put(CHUNK, job, chunk)
                finish = chunk.finish_reason or finish
        if finish is None:
            raise RemoteError("the server closed the stream before the reply finished.")
        self._put(DONE, job, (finish, usage))

    async def _post_whole(self, path: str, body: Mapping[str, Any], vocab_pieces: bool) -> WireChunk:
        resp = await self._client.post(self.base_url + path, json=dict(body))
        await _check_status(resp)
        try:
            obj = resp.json()
        except ValueError:
            raise RemoteError("the server's answer is not JSON.") from None
        chunk = parse_chunk(obj, vocab_pieces)
        if not chunk.has_logprobs:
            raise _no_logprobs()
        return chunk

    async def _whole(self, job: Job) -> None:
        """One non-streamed reply (mlx_lm.server), one request. Its ``top_logprobs`` list is
        unordered and the entry's own token is merely the list's first, so the chosen token
        is the list's most likely one when greedy (mlx-lm's argmax), else the one the
        reply's text continues with."""
        chunk = await self._post_whole(job.path, job.body, job.vocab_pieces)
        if job.read_chosen is not None:
            # What left no text at the end: nothing when cut at the length; the end token
            # when it stopped, unless a stop string may have (its tokens' text is dropped).
            finish = chunk.finish_reason
            silent = 0 if finish == "length" else (1 if "stop" not in job.body else None)
            chunk.entries = chosen_from_text(chunk.entries, chunk.text, job.read_chosen, silent)
        else:
            chunk.entries = [_most_likely(e) for e in chunk.entries]
        if job.keep is not None:
            keep_first(chunk, job.keep)  # the reply goes on: its finish is then pieces.CUT
        self._put(CHUNK, job, chunk)
        self._put(DONE, job, (chunk.finish_reason or "stop", chunk.usage))


def _most_likely(entry: WireEntry) -> WireEntry:
    best = min(entry.top, key=lambda a: (-a.logprob, a.token_id is None, a.token_id or 0), default=None)
    return WireEntry(best.token_id, best.raw, best.logprob, entry.top) if best else entry


def _no_logprobs() -> RemoteError:
    return RemoteError(
        "the server sent tokens without logprobs: it ignores `logprobs` (LM Studio does; "
        "see docs/REMOTE.md for servers that report them)."
    )


async def _check_status(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    body = await resp.aread()
    msg = server_message(body) or resp.reason_phrase
    raise RemoteError(f"the server answered {resp.status_code}: {msg}", status=resp.status_code, server_message=msg)


def _network_error(exc: httpx.HTTPError, base_url: str, timeout: float) -> RemoteError:
    if isinstance(exc, httpx.ConnectTimeout):
        return RemoteError(f"cannot connect to {base_url}: no answer to the connection attempt.")
    if isinstance(exc, httpx.ConnectError):
        return RemoteError(f"cannot connect to {base_url}: {exc or 'connection refused'}.")
    if isinstance(exc, httpx.TimeoutException):
        return RemoteError(f"{base_url} sent nothing for {timeout:g} s; gave up waiting.")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return RemoteError(f"{base_url} closed the connection mid-reply ({exc or type(exc).__name__}).")
    return RemoteError(f"request to {base_url} failed: {type(exc).__name__}: {exc}")
