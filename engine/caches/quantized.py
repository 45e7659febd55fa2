"""Quantized KV caches: a request's (mlx-lm's ``QuantizedKVCache``), the batch's
(:class:`BatchQuantizedKVCache`), when each converts, and which models can have one.

Keys and values are kept as mlx-lm keeps them, ``mx.quantize(x, group_size, bits)``
along the head dimension: a ``(packed uint32, scales, biases)`` tuple per tensor. Each
token's numbers are quantized on their own (groups run along the head dimension), so a
token's quantized key does not depend on the other tokens or rows, and mlx-lm's
attention (``scaled_dot_product_attention``) takes its quantized path for any cache
with ``bits``.

When (docs/ENGINE.md, "Quantized KV cache"): a request's ``KVCache`` layers become
quantized once it holds ``start`` tokens, checked when its cache is made and after each
forward pass (mlx-lm's ``maybe_quantize_kv_cache``, which checks after each pass only);
a batch is one kind, quantized once its longest row holds ``start`` tokens, and a row
joining a quantized batch is quantized first. Each quantized cache remembers how many
tokens a row held when it converted (``quantized_at``): before that point its numbers
were computed unquantized, so the prefix store never cuts it back below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import (
    BatchKVCache,
    CacheList,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    create_causal_mask,
    make_prompt_cache,
)

from engine.api.errors import EngineError
from engine.api.kv_quantization import KV_GROUP_SIZES, KVQuantization

Parts = tuple[mx.array, mx.array, mx.array]
"""``mx.quantize``'s output: packed integers, scales, biases."""


def packed_width(dim: int, bits: int) -> int:
    """uint32 words per ``dim`` numbers of ``bits`` bits (``mx.quantize``'s packing)."""
    return dim * bits // 32


def _empty_parts(batch: int, heads: int, dim: int, length: int, group_size: int, bits: int, dtype) -> Parts:
    return (
        mx.zeros((batch, heads, length, packed_width(dim, bits)), dtype=mx.uint32),
        mx.zeros((batch, heads, length, dim // group_size), dtype=dtype),
        mx.zeros((batch, heads, length, dim // group_size), dtype=dtype),
    )


# A request ------------------------------------------------------------------------------


class QuantizedCache(QuantizedKVCache):
    """mlx-lm's ``QuantizedKVCache`` plus ``quantized_at`` (the tokens it held when it
    converted). Its first buffer is sized with ``mx.quantize``'s packing: mlx-lm's own
    sizes it with ``32 // bits`` numbers per word, which is too many words for 5 and 6
    bits at some head widths (128: 21 for 20)."""

    def __init__(self, group_size: int = 64, bits: int = 8, quantized_at: int = 0) -> None:
        super().__init__(group_size=group_size, bits=bits)
        self.quantized_at = quantized_at

    def update_and_fetch(self, keys, values):
        if self.keys is None:
            b, h, _, dk = keys.shape
            dv = values.shape[-1]
            self.keys = _empty_parts(b, h, dk, 0, self.group_size, self.bits, keys.dtype)
            self.values = _empty_parts(b, h, dv, 0, self.group_size, self.bits, values.dtype)
        return super().update_and_fetch(keys, values)

    def size(self) -> int:
        return self.offset


def quantized_at(cache: QuantizedKVCache) -> int:
    """The tokens ``cache`` held when it converted (0 for one quantized from the start)."""
    return int(getattr(cache, "quantized_at", 0))


def quantize_layer(cache: KVCache, group_size: int, bits: int) -> QuantizedCache:
    """``KVCache.to_quantized``, quantizing only the tokens held (the same numbers)."""
    fresh = QuantizedCache(group_size, bits, quantized_at=cache.offset)
    fresh.offset = cache.offset
    if cache.keys is not None and cache.offset > 0:
        n = cache.offset
        fresh.keys = mx.quantize(cache.keys[..., :n, :], group_size=group_size, bits=bits)
        fresh.values = mx.quantize(cache.values[..., :n, :], group_size=group_size, bits=bits)
    return fresh


def quantize_when_due(caches: list, kv: KVQuantization) -> None:
    """A request's ``KVCache`` layers that hold ``kv.start`` tokens become quantized, in
    place (mlx-lm's ``maybe_quantize_kv_cache``: other kinds stay as they are)."""
    if kv.bits is None:
        return
    for i, cache in enumerate(caches):
        if type(cache) is KVCache and cache.offset >= kv.start:
            caches[i] = quantize_layer(cache, kv.group_size, kv.bits)


def new_caches(model: Any, kv: KVQuantization) -> list:
    """A request's caches, quantized from the start when ``kv.start == 0``."""
    caches = make_prompt_cache(model)
    quantize_when_due(caches, kv)
    return caches


def cut_quantized(cache: QuantizedKVCache, length: int) -> QuantizedCache:
    """A copy of the first ``length`` tokens (new arrays: later writes never reach ``cache``)."""
    fresh = QuantizedCache(cache.group_size, cache.bits, quantized_at=min(quantized_at(cache), length))
    fresh.offset = length
    if cache.keys is not None and length > 0:
        fresh.keys = tuple(x[..., :length, :] for x in cache.keys)
        fresh.values = tuple(x[..., :length, :] for x in cache.values)
    return fresh


# The batch ------------------------------------------------------------------------------


class BatchQuantizedKVCache(BatchKVCache):
    """mlx-lm's left-padded ``BatchKVCache`` with quantized keys and values: every method
    of the batch (``merge`` / ``extend`` / ``filter`` / ``extract`` / ``trim`` /
    ``make_mask``) does what ``BatchKVCache``'s does, on each of the three parts. With
    ``bits`` and ``group_size`` set, mlx-lm's attention takes its quantized path.

    ``quantized_at[i]``: how many tokens row ``i`` held when it became quantized."""

    step = 256
    unpadded = False

    def __init__(self, left_padding: Sequence[int], group_size: int = 64, bits: int = 8) -> None:
        super().__init__(list(left_padding))
        self.group_size, self.bits = group_size, bits
        self.quantized_at = mx.zeros((len(left_padding),), dtype=mx.int32)

    # Writing and reading ------------------------------------------------------------

    def update_and_fetch(self, keys, values):
        prev, n = self._idx, keys.shape[2]
        if self.keys is None or prev + n > self.keys[0].shape[2]:
            b, h, _, dk = keys.shape
            dv = values.shape[3]
            more = (self.step + n - 1) // self.step * self.step
            new_k = _empty_parts(b, h, dk, more, self.group_size, self.bits, keys.dtype)
            new_v = _empty_parts(b, h, dv, more, self.group_size, self.bits, values.dtype)
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                if prev % self.step != 0:
                    self.keys = tuple(x[..., :prev, :] for x in self.keys)
                    self.values = tuple(x[..., :prev, :] for x in self.values)
                self.keys = tuple(mx.concatenate([x, y], axis=2) for x, y in zip(self.keys, new_k, strict=True))
                self.values = tuple(mx.concatenate([x, y], axis=2) for x, y in zip(self.values, new_v, strict=True))
        self.offset = self.offset + n
        self._idx += n
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        for i in range(3):
            self.keys[i][..., prev : self._idx, :] = qk[i]
            self.values[i][..., prev : self._idx, :] = qv[i]
        return self.keys_and_values()

    def keys_and_values(self):
        return tuple(x[..., : self._idx, :] for x in self.keys), tuple(x[..., : self._idx, :] for x in self.values)

    def make_mask(self, N: int, return_array: bool = False, **kwargs):  # noqa: N803 (mlx-lm's name)
        if N == 1 and self.unpadded and not return_array and not kwargs.get("window_size"):
            return None  # as engine.caches.batch.BatchCache: no mask array when no row is padded
        return create_causal_mask(N, offset=self._idx, left_padding=self.left_padding, **kwargs)

    def prepare(self, **kwargs):
        raise NotImplementedError("BatchQuantizedKVCache is built by merge/extend, not prepared")

    # The rows ------------------------------------------------------------------------

    @classmethod
    def merge(cls, caches: Sequence[QuantizedKVCache]) -> BatchQuantizedKVCache:
        """Left-padded rows of the given request caches (copies of their data)."""
        first = caches[0]
        group_size, bits = first.group_size, first.bits
        if any((c.group_size, c.bits) != (group_size, bits) for c in caches):
            raise ValueError("cannot batch quantized caches of different bits or group sizes")
        lengths = [c.offset for c in caches]
        longest = max(lengths)
        padding = [longest - n for n in lengths]
        cache = cls(padding, group_size, bits)
        cache.quantized_at = mx.array([min(quantized_at(c), c.offset) for c in caches], dtype=mx.int32)
        if longest == 0:
            return cache
        template = next(c for c in caches if c.keys is not None and c.offset > 0)
        rows = len(caches)

        def stacked(parts: Parts, which: str) -> Parts:
            out = tuple(mx.zeros((rows, x.shape[1], longest, x.shape[3]), dtype=x.dtype) for x in parts)
            for i, (pad, c) in enumerate(zip(padding, caches, strict=True)):
                if c.keys is None or c.offset == 0:
                    continue
                for o, x in zip(out, getattr(c, which), strict=True):
                    o[i : i + 1, :, pad : pad + c.offset] = x[..., : c.offset, :]
            return out

        cache.keys, cache.values = stacked(template.keys, "keys"), stacked(template.values, "values")
        cache.offset = cache.offset + longest
        cache._idx = longest
        return cache

    @classmethod
    def from_batch(cls, batch: BatchKVCache, group_size: int, bits: int) -> BatchQuantizedKVCache:
        """An unquantized batch cache converted (every row's tokens quantized as they are)."""
        cache = cls.__new__(cls)
        cache.group_size, cache.bits = group_size, bits
        offsets = batch._idx - batch.left_padding  # each row's length now (``batch.offset`` may be an int)
        cache.left_padding, cache.offset, cache._idx = batch.left_padding, offsets, batch._idx
        cache._right_padding = None
        cache.unpadded = getattr(batch, "unpadded", False)
        cache.quantized_at = offsets.astype(mx.int32)
        cache.keys = cache.values = None
        if batch.keys is not None and batch._idx > 0:
            n = batch._idx
            cache.keys = mx.quantize(batch.keys[..., :n, :], group_size=group_size, bits=bits)
            cache.values = mx.quantize(batch.values[..., :n, :], group_size=group_size, bits=bits)
        return cache

    def filter(self, batch_indices):
        """Keep the given rows (in place), then drop the padding every row has."""
        if self.keys is not None:
            self.keys = tuple(x[batch_indices] for x in self.keys)
            self.values = tuple(x[batch_indices] for x in self.values)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        self.quantized_at = self.quantized_at[batch_indices]
        shift = min(self.left_padding.tolist())
        if shift > 0:
            if self.keys is not None:
                self.keys = tuple(x[..., shift:, :] for x in self.keys)
                self.values = tuple(x[..., shift:, :] for x in self.values)
            self._idx -= shift
            self.left_padding = self.left_padding - shift

    def extend(self, other):
        """Append ``other``'s rows (in place), right-aligned at the longer of the two; an
        unquantized batch cache is quantized first."""
        if not isinstance(other, BatchQuantizedKVCache):
            other = BatchQuantizedKVCache.from_batch(other, self.group_size, self.bits)
        if (other.group_size, other.bits) != (self.group_size, self.bits):
            raise ValueError("cannot batch quantized caches of different bits or group sizes")
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            self.quantized_at = mx.concatenate([self.quantized_at, other.quantized_at])
            return
        top = max(self._idx, other._idx)
        template = self if self.keys is not None else other
        size = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)

        def pad(c: BatchQuantizedKVCache):
            k, v = c.keys, c.values
            if k is None:
                rows = c.offset.shape[0]
                k = tuple(mx.zeros((rows, x.shape[1], 0, x.shape[3]), dtype=x.dtype) for x in template.keys)
                v = tuple(mx.zeros((rows, x.shape[1], 0, x.shape[3]), dtype=x.dtype) for x in template.values)
            left = top - c._idx
            right = size - k[0].shape[2] - left
            if right < 0:  # only unused room past the last token goes
                k = tuple(x[..., :right, :] for x in k)
                v = tuple(x[..., :right, :] for x in v)
                right = 0
            if left or right:
                widths = [(0, 0), (0, 0), (left, right), (0, 0)]
                k = tuple(mx.pad(x, widths) for x in k)
                v = tuple(mx.pad(x, widths) for x in v)
            return k, v, c.offset, c.left_padding + left, c.quantized_at

        (k1, v1, o1, p1, q1), (k2, v2, o2, p2, q2) = pad(self), pad(other)
        self.keys = tuple(mx.concatenate([a, b]) for a, b in zip(k1, k2, strict=True))
        self.values = tuple(mx.concatenate([a, b]) for a, b in zip(v1, v2, strict=True))
        self.offset = mx.concatenate([o1, o2])
        self.left_padding = mx.concatenate([p1, p2])
        self.quantized_at = mx.concatenate([q1, q2])
        self._idx = top

    def extract(self, idx: int) -> QuantizedCache:
        """Row ``idx`` as a request's cache (a copy)."""
        padding = self.left_padding.tolist()[idx]
        length = self._idx - padding
        row = QuantizedCache(self.group_size, self.bits, quantized_at=min(self.quantized_at.tolist()[idx], length))
        row.offset = length
        if self.keys is not None and length > 0:
            row.keys = tuple(mx.contiguous(x[idx : idx + 1, :, padding : self._idx]) for x in self.keys)
            row.values = tuple(mx.contiguous(x[idx : idx + 1, :, padding : self._idx]) for x in self.values)
        return row

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return sum(x.nbytes for x in (*self.keys, *self.values))


def quantize_batch_when_due(batch: list | None, kv: KVQuantization) -> None:
    """The batch's unquantized ``BatchKVCache`` layers whose longest row holds ``kv.start``
    tokens become quantized, in place."""
    if batch is None or kv.bits is None:
        return
    for i, cache in enumerate(batch):
        if isinstance(cache, BatchKVCache) and not isinstance(cache, BatchQuantizedKVCache) and cache._idx >= kv.start:
            batch[i] = BatchQuantizedKVCache.from_batch(cache, kv.group_size, kv.bits)


def same_kind(mine: Any, theirs: Any) -> Any:
    """``mine`` made the kind of ``theirs`` before ``mine.extend(theirs)``: a batch that
    takes a quantized row is quantized (``BatchQuantizedKVCache.extend`` quantizes an
    unquantized ``theirs`` itself)."""
    quantized = isinstance(theirs, BatchQuantizedKVCache)
    if quantized and isinstance(mine, BatchKVCache) and not isinstance(mine, BatchQuantizedKVCache):
        return BatchQuantizedKVCache.from_batch(mine, theirs.group_size, theirs.bits)
    return mine


# Which models ------------------------------------------------------------------------------


def check_kinds(caches: list, kv: KVQuantization) -> None:
    """Refuse a setting the model's cache kinds cannot take (no MLX work)."""
    if not kv.enabled:
        return
    top = {type(c).__name__ for c in caches}
    if any(isinstance(c, RotatingKVCache) for c in caches):
        raise EngineError(
            f"kv_bits {kv.bits}: this model's sliding-window layers use RotatingKVCache, which mlx-lm "
            "cannot quantize (RotatingKVCache.to_quantized is not implemented); load it without kv_bits."
        )
    if not any(type(c) is KVCache for c in caches):
        kinds = ", ".join(sorted(top))
        raise EngineError(
            f"kv_bits {kv.bits}: none of this model's caches can be quantized ({kinds}); mlx-lm quantizes "
            "plain KVCache layers only."
        )
    unknown = top - {"KVCache", "ArraysCache", "CacheList"}
    if unknown:  # pragma: no cover - the scheduler refuses these kinds anyway
        raise EngineError(f"kv_bits {kv.bits}: cannot quantize beside {', '.join(sorted(unknown))} caches.")


def check_model(model: Any, kv: KVQuantization) -> None:
    """Refuse, with the reason, a model that cannot run with ``kv``: its cache kinds, then
    one token through the model with quantized caches (head widths that are not a multiple
    of the group size, attention that ignores mlx-lm's quantized path)."""
    if not kv.enabled:
        return
    plain = make_prompt_cache(model)
    check_kinds(plain, kv)
    token = mx.array([[0]], dtype=mx.int32)
    widths = _head_widths(model, plain, token)
    odd = sorted({w for w in widths if w % kv.group_size})
    if odd:
        fits = [g for g in KV_GROUP_SIZES if all(w % g == 0 for w in widths)]
        hint = f" ({', '.join(map(str, fits))} would fit)" if fits else ""
        raise EngineError(
            f"kv_group_size {kv.group_size}: this model's attention heads are {'/'.join(map(str, odd))} "
            f"numbers wide, not a multiple of the group size{hint}."
        )
    try:
        mx.eval(model(token, cache=new_caches(model, KVQuantization(kv.bits, kv.group_size, 0))))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise EngineError(f"this model cannot run with a {kv.describe()} KV cache: {reason}") from exc


def _head_widths(model: Any, caches: list, token: mx.array) -> list[int]:
    """The key and value widths of the model's plain KVCache layers, from one token."""
    mx.eval(model(token, cache=caches))
    widths = []
    for cache in caches:
        if type(cache) is KVCache and cache.keys is not None:
            widths += [int(cache.keys.shape[-1]), int(cache.values.shape[-1])]
    return widths


def layer_kinds(caches: list) -> list[str]:
    """The kinds of a running cache list, CacheList members included (for tests and reports)."""
    names = []
    for cache in caches:
        if isinstance(cache, CacheList):
            names += layer_kinds(list(cache.caches))
        else:
            names.append(type(cache).__name__)
    return names


__all__ = [
    "BatchQuantizedKVCache",
    "QuantizedCache",
    "check_kinds",
    "check_model",
    "cut_quantized",
    "new_caches",
    "quantize_batch_when_due",
    "quantize_when_due",
    "quantized_at",
    "same_kind",
]
