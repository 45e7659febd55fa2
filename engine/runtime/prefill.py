"""Reading a prompt into a request's own caches, a chunk per scheduler step.

The request at the head of the queue starts from the longest prefix the prefix store
holds (the rest of a branch, the next chat turn), then reads its prompt in chunks sized by
the measured rate (``engine.runtime.chunking``), so a long prompt never freezes the rows
already generating and a cancel lands between chunks. The scheduler joins the request to
the running batch once its last chunk is read (``Scheduler._prefill_chunk``).

**The next chunk's graph is built while one runs.** Before a step waits for its chunk, it
builds the following chunk's graph and queues it behind (``mx.async_eval``), so the device
goes from one chunk to the next without waiting for the host to build a graph: on a GPU a
prompt longer than one chunk is read back to back. A step waits only for its own chunk
(the caches' arrays as that chunk left them), reports it, and the next step takes the
queued chunk up where it is. A chunk's time is measured from when the device could start
it (the end of the chunk before it) to its end. A cancel between two steps lets the queued
chunk finish on the device (at most one chunk, which the sizer keeps to a fraction of a
second); the request's caches then hold it, and ``fed`` says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from engine.api.kv_quantization import KVQuantization
from engine.caches import batch as kv
from engine.runtime.chunking import ChunkSizer
from engine.runtime.requests import Request


@dataclass
class _Chunk:
    """A chunk whose graph is built: its size, its last logits, the arrays to wait for."""

    request: Request
    size: int
    logits: mx.array
    marks: list[mx.array]


class PromptReader:
    """Reads prompts into per-request caches for one model (the scheduler's, passed to each
    call: the scheduler's ``model`` is the one that runs)."""

    def __init__(self, kv_setting: KVQuantization, chunks: ChunkSizer, store: kv.PrefixStore, checkpoint: bool) -> None:
        self.kv_quantization, self.chunks, self.store = kv_setting, chunks, store
        self.checkpoint = checkpoint
        """Keep each prompt's end in the store: the model's caches cannot be cut back (a
        wrapped window, recurrent state), so a branch prefills only what follows it."""
        self._queued: _Chunk | None = None
        self._ready_at: float | None = None  # when the device finished the last chunk waited for

    def reported(self, request: Request) -> int:
        """The prompt tokens read so far (a chunk queued but not waited for not counted)."""
        queued = self._queued
        return request.prefilled - (queued.size if queued is not None and queued.request is request else 0)

    def read(self, model: Any, request: Request, busy: bool) -> mx.array | None:
        """Run the next chunk of ``request``'s prompt (``busy``: rows are decoding beside it).
        Returns the last position's logits [1, V] once the whole prompt is read, else None."""
        chunk, self._queued = self._queued, None
        if chunk is None or chunk.request is not request:  # nothing queued for it (or for another)
            if request.caches is None:
                request.reused, request.caches = self.store.lookup(request.prompt)
                if request.caches is None:
                    request.caches = kv.new_request_cache(model, self.kv_quantization)
                request.prefilled = request.reused
            self._ready_at = time.perf_counter()
            chunk = self._build(model, request, busy)
        if request.prefill_remaining() > 0:
            self._queued = self._build(model, request, busy)  # queued behind this one
            mx.async_eval(self._queued.marks)
        mx.eval(chunk.marks)
        done = time.perf_counter()
        elapsed = done - (self._ready_at if self._ready_at is not None else done)
        self._ready_at = done
        request.prefill_seconds += elapsed
        if self._queued is not None:
            self.chunks.record(chunk.size, elapsed)
            return None
        if self.checkpoint:
            self.store.add(request.prompt, [kv.cut(c, request.fed, request.fed) for c in request.caches])
        return chunk.logits[:, -1, :]

    def _build(self, model: Any, request: Request, busy: bool) -> _Chunk:
        """The graph of the next chunk of ``request``'s prompt (nothing evaluated)."""
        start = request.prefilled
        tokens = request.prompt[start : start + self.chunks.size(busy=busy)]
        logits = model(mx.array(tokens)[None], cache=request.caches)
        kv.after_forward(request.caches, self.kv_quantization)
        request.prefilled += len(tokens)
        request.fed = request.prefilled
        # Wait on the caches as this chunk leaves them, never on its logits: a chunk before
        # the last one needs no logits, and computing them (the head over every position of
        # the chunk) cost four times the whole prefill.
        return _Chunk(request, len(tokens), logits, kv.cache_arrays(request.caches))

    def hand_over(self, request: Request, heir: Request) -> None:
        """``heir`` took over ``request``'s caches (a fork leader cancelled during its
        prefill): a chunk queued for it is the heir's now. Dropped instead, a queued last
        chunk would take the prompt's last logits with it, and the heir's next read would
        find no token left to read."""
        if self._queued is not None and self._queued.request is request:
            self._queued.request = heir

    def drop(self) -> None:
        """Forget a queued chunk (its request failed or left): its arrays compute and go."""
        self._queued = None

    def keep(self, request: Request) -> None:
        """A request that ended before joining the batch: its caches go to the store."""
        if self._queued is not None and self._queued.request is request:
            self._queued = None
        if request.caches is None:
            return
        if request.fed > 0:
            self.store.add(request.history[: request.fed], request.caches)
        request.caches = None
