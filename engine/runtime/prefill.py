"""Reading a prompt into a request's own caches, a chunk per scheduler step.

The request at the head of the queue starts from the longest prefix the prefix store
holds (the rest of a branch, the next chat turn), then reads its prompt in chunks sized by
the measured rate (``engine.runtime.chunking``), so a long prompt never freezes the rows
already generating and a cancel lands between chunks. The scheduler joins the request to
the running batch once its last chunk is read (``Scheduler._join``).
"""

from __future__ import annotations

import time
from typing import Any

import mlx.core as mx

from engine.api.kv_quantization import KVQuantization
from engine.caches import batch as kv
from engine.runtime.chunking import ChunkSizer
from engine.runtime.requests import Request


class PromptReader:
    """Reads prompts into per-request caches for one model (the scheduler's, passed to each
    call: the scheduler's ``model`` is the one that runs)."""

    def __init__(self, kv_setting: KVQuantization, chunks: ChunkSizer, store: kv.PrefixStore, checkpoint: bool) -> None:
        self.kv, self.chunks, self.store = kv_setting, chunks, store
        self.checkpoint = checkpoint
        """Keep each prompt's end in the store: the model's caches cannot be cut back (a
        wrapped window, recurrent state), so a branch prefills only what follows it."""

    def read(self, model: Any, request: Request, busy: bool) -> mx.array | None:
        """Run the next chunk of ``request``'s prompt (``busy``: rows are decoding beside it).
        Returns the last position's logits [1, V] once the whole prompt is read, else None."""
        if request.caches is None:
            request.reused, request.caches = self.store.lookup(request.prompt)
            if request.caches is None:
                request.caches = kv.new_request_cache(model, self.kv)
            request.prefilled = request.reused
        start = request.prefilled
        chunk = request.prompt[start : start + self.chunks.size(busy=busy)]
        began = time.perf_counter()
        logits = model(mx.array(chunk)[None], cache=request.caches)
        kv.after_forward(request.caches, self.kv)
        request.prefilled += len(chunk)
        request.fed = request.prefilled
        if request.prefill_remaining() > 0:
            kv.eval_caches(request.caches)
            elapsed = time.perf_counter() - began
            self.chunks.record(len(chunk), elapsed)
            request.prefill_seconds += elapsed
            return None
        if self.checkpoint:
            self.store.add(request.prompt, [kv.cut(c, request.fed, request.fed) for c in request.caches])
        return logits[:, -1, :]

    def keep(self, request: Request) -> None:
        """A request that ended before joining the batch: its caches go to the store."""
        if request.caches is None:
            return
        if request.fed > 0:
            self.store.add(request.history[: request.fed], request.caches)
        request.caches = None
