"""The next decode step, queued on the device before the current one is read back.

Like mlx-lm's ``generate_step``, a step queues the next one on its device-side tokens
before it copies its own inspection data to the host: the forward pass, and the next
sampling where every state the chains read takes the token on the device
(``SamplingBatch.sample_ahead``). The scheduler owns one :class:`Lookahead` for its
running rows and asks it, at the next step, for what still holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from engine.api.kv_quantization import KVQuantization
from engine.caches import batch as kv
from engine.runtime.requests import Request
from engine.sampling.batch import SamplingBatch
from engine.sampling.sampled import Sampled


class Lookahead:
    """What was queued for the next step of the running rows, in their order."""

    def __init__(self) -> None:
        self.logits: mx.array | None = None
        """[B, V]: the next step's logits (they do not depend on the settings)."""
        self.sampled: Sampled | None = None
        """The next step sampled from them, or None (a state needed the token on the host)."""
        self._version = -1  # the sampling batch's version when ``sampled`` was made

    def queue(
        self,
        model,
        cache: list,
        kv_setting: KVQuantization | None,
        requests: Sequence[Request],
        tokens: mx.array,
        sampling: SamplingBatch | None,
    ) -> None:
        """Queue the next step on ``tokens`` ([B], this step's, on the device): its forward
        pass through ``cache``, and its sampling by ``sampling`` (None: not sampled ahead)."""
        self.logits = model(tokens[:, None], cache=cache)[:, -1, :]
        kv.after_batch_forward(cache, kv_setting)
        queued = [self.logits]
        self.sampled = None
        if sampling is not None:
            leaving = [r.leaving_next() for r in requests]
            following = [r.next_index + 1 for r in requests]
            self.sampled = sampling.sample_ahead(self.logits, tokens, leaving, following)
            if self.sampled is not None:
                self._version = sampling.version
                queued += [self.sampled.tokens, self.sampled.packed]
        mx.async_eval(*queued)
        for request in requests:
            request.fed += 1

    def take(self, version: int) -> tuple[mx.array | None, Sampled | None]:
        """The queued logits and sampled step, then nothing is queued. The sampled step only
        while the sampling batch is at ``version`` still (no live change, join or switch of
        settings since: the logits are sampled again then)."""
        logits, sampled = self.logits, self.sampled
        self.clear()
        return logits, sampled if sampled is not None and self._version == version else None

    def keep(self, rows: Sequence[int]) -> None:
        """Only ``rows`` stay running (in this order); the others left the batch."""
        if not rows:
            self.clear()
            return
        if self.logits is not None:
            self.logits = self.logits[mx.array(list(rows), dtype=mx.int32)]
        if self.sampled is not None:
            self.sampled = self.sampled.take(rows)

    def clear(self) -> None:
        self.logits, self.sampled = None, None
