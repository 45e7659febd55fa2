"""Per-row token counts over the penalty window, on the host and on the device.

:class:`TokenPositions` is where each token stands in a row's history: its count in any
window is two bisections, so the host tells every candidate's count (the inspection's
``count``, in the chain or not) without the device. :class:`PenaltyCounts` is the [B, V]
int32 array the penalties stage reads: like llama.cpp's penalties sampler (a ring buffer
plus a count map updated in ``accept``), each step adds the one new token and removes the
one that left the window, instead of recounting the history; it follows the batch (filter
/ extend) and feeds :func:`engine.stages.penalties.apply_penalties`. Where the compiled
step covers the whole batch, :func:`next_counts` is that update inside it (state in, new
state out); the scatters of :meth:`PenaltyCounts.accept` serve the other steps.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from engine.stages.base import device_constant, vocabulary_ids


def leaving_token(window: int, head: Sequence[int], tail: Sequence[int] = (), coming: int = 0) -> int | None:
    """The token that left the window when the newest token arrived; the history is
    ``head + tail`` (prompt and output), read in place rather than concatenated.
    ``coming=1``: the one that will leave when the next token arrives (never that token)."""
    length = len(head) + len(tail) + coming
    if window <= 0 or length <= window:
        return None
    index = length - window - 1
    return head[index] if index < len(head) else tail[index - len(head)]


class TokenPositions:
    """Where each token stands in one row's history (prompt and output), appended to as the
    row generates."""

    def __init__(self, history: Sequence[int] = ()) -> None:
        self.length = 0
        self.tokens: list[int] = []
        self._at: dict[int, list[int]] = {}
        for token in history:
            self.append(token)

    def append(self, token: int) -> None:
        at = self._at.get(token)
        if at is None:
            self._at[token] = [self.length]
        else:
            at.append(self.length)
        self.tokens.append(token)
        self.length += 1

    def __len__(self) -> int:
        return self.length

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length``: O(tokens forgotten)."""
        while self.length > length:
            token = self.tokens.pop()
            at = self._at[token]
            at.pop()
            if not at:
                del self._at[token]
            self.length -= 1

    def leaving(self, window: int, ahead: int = 0) -> int:
        """The token that leaves a window of ``window`` (0: all) when the next token arrives,
        after ``ahead`` tokens not appended yet (taken on the device): :data:`NO_TOKEN` when
        none leaves, :data:`WHOLE_WINDOW` when the window is the new token alone (the one
        leaving may be among those ``ahead``)."""
        if window == 1:
            return WHOLE_WINDOW
        token = leaving_token(window, self.tokens, coming=ahead + 1)
        return NO_TOKEN if token is None else token

    def count(self, token: int, window: int, end: int | None = None) -> int:
        """How often ``token`` occurs among the last ``window`` tokens (0: all) of the
        history's first ``end`` (None: all of it so far)."""
        at = self._at.get(token)
        if not at:
            return 0
        end = self.length if end is None else end
        return bisect_left(at, end) - (bisect_left(at, end - window) if window > 0 else 0)

    def counts(self, window: int, vocab: int) -> np.ndarray:
        """Every token's :meth:`count`: [V] int32 (the device's counts, made afresh)."""
        out = np.zeros(vocab, np.int32)
        for token in self._at:
            if token < vocab:
                out[token] = self.count(token, window)
        return out


NO_TOKEN = -1
WHOLE_WINDOW = -2


def next_counts(counts: mx.array, tokens: mx.array, leaving: mx.array) -> mx.array:
    """[B, V] int32 ``counts`` after each row's new token (``tokens`` [B] int32) arrived and
    its ``leaving`` ([B, 1] int32, :meth:`TokenPositions.leaving`) left the window.

    Element-wise (pure; traced into the compiled step): one fused kernel over the rows,
    where the scatters of :meth:`PenaltyCounts.accept` are two kernels and a host array of
    the leaving tokens a step. The same counts to the bit.
    """
    ids = vocabulary_ids(counts.shape[-1])
    arrived = (ids == tokens[:, None]).astype(mx.int32)
    left = (ids == leaving).astype(mx.int32)
    return mx.where(leaving == WHOLE_WINDOW, arrived, counts + arrived - left)


_rows_and_ones = device_constant(lambda batch: (mx.arange(batch, dtype=mx.int32), mx.ones((batch,), mx.int32)))
"""[0 .. batch - 1] and ``batch`` ones (int32), per batch size."""


class PenaltyCounts:
    """Token counts for the rows of a batch, in batch order."""

    def __init__(self, counts: mx.array) -> None:
        self.counts = counts  # [B, V] int32

    @classmethod
    def of_rows(cls, rows: Sequence[np.ndarray], vocab: int) -> PenaltyCounts:
        """From each row's [V] int32 counts (``TokenPositions.counts``)."""
        return cls(mx.array(np.stack(rows)) if rows else mx.zeros((0, vocab), mx.int32))

    def accept(self, tokens: Sequence[int] | mx.array, leaving: Sequence[int | None]) -> None:
        """Count each row's new token and drop the token that left its window; ``tokens``
        may still be on the device ([B] int32: the step is not read back yet).

        O(B) scatters, independent of history length: the new tokens with constant rows and
        ones (no host array while the tokens are on the device), then the tokens that left,
        only where some did.
        """
        rows, ones = _rows_and_ones(len(leaving))
        new = tokens.reshape(-1) if isinstance(tokens, mx.array) else mx.array(list(tokens))
        counts = self.counts.at[rows, new.astype(mx.int32)].add(ones)
        gone = [(row, token) for row, token in enumerate(leaving) if token is not None]
        if gone:
            gone_rows, gone_tokens = (mx.array(list(column), dtype=mx.int32) for column in zip(*gone, strict=True))
            counts = counts.at[gone_rows, gone_tokens].add(mx.array(-1, dtype=mx.int32))
        self.counts = counts

    def filter(self, keep: Sequence[int]) -> None:
        self.counts = self.counts[mx.array(list(keep), dtype=mx.int32)]

    def extend(self, other: PenaltyCounts) -> None:
        self.counts = mx.concatenate([self.counts, other.counts], axis=0)

    def __len__(self) -> int:
        return self.counts.shape[0]
