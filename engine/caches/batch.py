"""Caches: per-request caches, the batch cache, snapshots, and prefix reuse.

A request prefills into its own per-layer caches (``make_prompt_cache``: ``KVCache``,
``RotatingKVCache`` for sliding windows, ``ArraysCache`` for recurrent state, or a
``CacheList`` of those). When its prompt is done they are merged into the running
batch with mlx-lm's own ``merge`` (left-padded ``BatchKVCache`` /
``BatchRotatingKVCache``, stacked ``ArraysCache``), and the batch is kept in step with
the rows by mlx-lm's ``filter`` / ``extend`` / ``extract``.

With a quantized KV cache (``LoadedModel.kv``, :mod:`engine.caches.quantized`) a
request's ``KVCache`` layers become mlx-lm's ``QuantizedKVCache`` and the batch's
``BatchQuantizedKVCache``; the batch is one kind, so a row joining it is made its kind.

Reuse depends on the kind. A ``KVCache`` can be cut back to any shorter prefix (a quantized one to
any prefix at least as long as when it converted); a
``RotatingKVCache`` only while its window has not wrapped; recurrent state
(``ArraysCache``) never: it is reused only at exactly the tokens it holds. The
:class:`PrefixStore` therefore keeps, besides the caches of finished requests, a
snapshot at the end of each prompt for models whose caches cannot be cut, so a branch
or the next chat turn restores the nearest checkpoint and prefills only the rest.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models.cache import (
    ArraysCache,
    BatchKVCache,
    CacheList,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)

from engine.api.kv_quantization import KV_OFF, KVQuantization
from engine.caches import quantized as quant

LayerCaches = list[Any]

BATCHABLE = (KVCache, RotatingKVCache, ArraysCache, CacheList)


def new_request_cache(model: Any, kv: KVQuantization = KV_OFF) -> LayerCaches:
    """A request's caches; with ``kv`` on and ``kv.start == 0`` already quantized."""
    return quant.new_caches(model, kv) if kv.enabled else make_prompt_cache(model)


def after_forward(caches: LayerCaches, kv: KVQuantization) -> None:
    """After a request's forward pass: quantize its layers when due (in place)."""
    quant.quantize_when_due(caches, kv)


def after_batch_forward(batch: list | None, kv: KVQuantization) -> None:
    """After the batch's forward pass: quantize it when its longest row is due (in place)."""
    quant.quantize_batch_when_due(batch, kv)


def unsupported_kinds(caches: LayerCaches) -> list[str]:
    """Names of cache kinds mlx-lm cannot batch (empty when every layer can be batched)."""
    bad = set()
    for cache in caches:
        if isinstance(cache, CacheList):
            bad.update(unsupported_kinds(list(cache.caches)))
        elif type(cache) not in BATCHABLE:
            bad.add(type(cache).__name__)
    return sorted(bad)


def kinds(caches: LayerCaches) -> list[str]:
    """The cache kinds of a model's layers, e.g. ``["KVCache", "RotatingKVCache"]``."""
    names = set()
    for cache in caches:
        names.update(kinds(list(cache.caches)) if isinstance(cache, CacheList) else [type(cache).__name__])
    return sorted(names)


def quantized_layers(caches: LayerCaches) -> bool:
    """Whether any layer (a ``CacheList``'s too) holds quantized keys and values."""
    return any(
        quantized_layers(list(c.caches)) if isinstance(c, CacheList) else isinstance(c, QuantizedKVCache)
        for c in caches
    )


def cache_arrays(caches: LayerCaches) -> list[mx.array]:
    """Every array the caches hold (what evaluating them computes)."""
    return [v for _, v in tree_flatten([c.state for c in caches]) if isinstance(v, mx.array)]


def eval_caches(caches: LayerCaches) -> None:
    mx.eval(cache_arrays(caches))


# Cutting and copying ------------------------------------------------------------------


def can_cut(cache: Any, length: int, held: int) -> bool:
    """Whether ``cache`` (holding ``held`` tokens) can give a copy of its first ``length``."""
    if length == held:
        return True
    if isinstance(cache, KVCache):
        return length <= cache.offset
    if isinstance(cache, QuantizedKVCache):
        # Before it converted, the original computed these tokens unquantized.
        return quant.quantized_at(cache) <= length <= cache.offset
    if isinstance(cache, RotatingKVCache):
        # Not yet wrapped: the keys are in temporal order and nothing was evicted.
        return cache.offset < cache.max_size and cache._idx == cache.offset and length <= cache.offset
    if isinstance(cache, CacheList):
        return all(can_cut(c, length, held) for c in cache.caches)
    return False


def cut(cache: Any, length: int, held: int) -> Any:
    """A copy of ``cache`` holding its first ``length`` tokens (see :func:`can_cut`).

    Slicing makes new arrays, so later writes to the copy never reach the original.
    """
    if isinstance(cache, CacheList):
        return CacheList(*(cut(c, length, held) for c in cache.caches))
    if isinstance(cache, KVCache):
        fresh = KVCache()
        fresh.keys, fresh.values, fresh.offset = cache.keys[..., :length, :], cache.values[..., :length, :], length
        return fresh
    if isinstance(cache, QuantizedKVCache):
        return quant.cut_quantized(cache, length)
    if isinstance(cache, RotatingKVCache):
        fresh = RotatingKVCache(cache.max_size, cache.keep)
        if length == held and not can_cut(cache, length - 1, held):  # wrapped: copy it whole
            fresh.keys, fresh.values = cache.keys[...], cache.values[...]
            fresh.offset, fresh._idx = cache.offset, cache._idx
        else:
            fresh.keys, fresh.values = cache.keys[..., :length, :], cache.values[..., :length, :]
            fresh.offset = fresh._idx = length
        return fresh
    if isinstance(cache, ArraysCache):
        fresh = ArraysCache(len(cache.cache))
        fresh.cache = [c[...] if c is not None else None for c in cache.cache]
        return fresh
    raise TypeError(f"cannot copy a {type(cache).__name__}")


def cut_floor(caches: LayerCaches, held: int) -> int | None:
    """The shortest prefix (>= 1) every layer can be cut back to; None when only ``held``."""
    floors = [_floor(c, held) for c in caches]
    return None if None in floors else max([1, *floors])


def _floor(cache: Any, held: int) -> int | None:
    if isinstance(cache, CacheList):
        return cut_floor(list(cache.caches), held)
    if isinstance(cache, QuantizedKVCache):
        return max(1, quant.quantized_at(cache))
    return 1 if can_cut(cache, 1, held) else None


# The batch ------------------------------------------------------------------------------


class BatchCache(BatchKVCache):
    """mlx-lm's left-padded batch cache, run as mlx-lm's plain ``KVCache`` graph when no row
    is padded (a single request, or rows of equal length): an integer offset (RoPE's scalar
    form, no offset array carried through every layer) and no attention mask for a decode
    step (SDPA without a mask array is ~3% faster per step on the CPU backend)."""

    unpadded = False
    _offsets = None  # each row's offset as an array; None: derive it from ``_idx - left_padding``

    @property
    def offset(self):
        if self.unpadded:
            return self._idx
        if self._offsets is None:
            self._offsets = self._idx - self.left_padding
        return self._offsets

    @offset.setter
    def offset(self, value) -> None:
        # An int comes back from the unpadded form: the array is derived when next needed
        # (mlx-lm's methods keep every row's offset at ``_idx - left_padding``).
        self._offsets = None if isinstance(value, int) else value

    def extend(self, other) -> None:
        # mlx-lm's extend and filter work on the offsets' array form; ``_note_padding``
        # decides again once the rows have changed.
        self.unpadded = other.unpadded = False
        super().extend(other)

    def filter(self, batch_indices) -> None:
        self.unpadded = False
        super().filter(batch_indices)

    def make_mask(self, N: int, return_array: bool = False, **kwargs):  # noqa: N803 (mlx-lm's name)
        if N == 1 and self.unpadded and not return_array and not kwargs.get("window_size"):
            return None
        return super().make_mask(N, return_array=return_array, **kwargs)


def _note_padding(batch: list) -> list:
    """One host read per change of the batch's rows, never per step."""
    plain = [c for c in batch if isinstance(c, BatchCache | quant.BatchQuantizedKVCache)]
    if plain:
        unpadded = int(mx.max(plain[0].left_padding).item()) == 0
        for cache in plain:
            cache.unpadded = unpadded
    return batch


def to_batch(caches: LayerCaches, copies: int = 1) -> list:
    """One request's caches as a batch of ``copies`` rows (mlx-lm's ``merge`` for each kind,
    which copies the data, so the rows of a fork never share a buffer)."""
    return _note_padding([_merge(c, copies) for c in caches])


def _merge(cache: Any, copies: int) -> Any:
    if type(cache) is KVCache:
        return BatchCache.merge([cache] * copies)
    if isinstance(cache, QuantizedKVCache):
        return quant.BatchQuantizedKVCache.merge([cache] * copies)
    return cache.merge([cache] * copies)


def extend_batch(batch: list | None, other: list) -> list:
    if batch is None:
        return other
    for i, theirs in enumerate(other):
        batch[i] = quant.same_kind(batch[i], theirs)  # a batch holding a quantized row is quantized
        batch[i].extend(theirs)
    return _note_padding(batch)


def extract_row(batch: list, row: int) -> LayerCaches:
    return [c.extract(row) for c in batch]


def filter_batch(batch: list, keep: Sequence[int]) -> list | None:
    if not keep:
        return None
    index = mx.array(list(keep), dtype=mx.int32)
    for cache in batch:
        cache.filter(index)
    return _note_padding(batch)


# Prefix reuse ---------------------------------------------------------------------------


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    caches: LayerCaches
    floor: int | None
    """The shortest prefix it can be cut back to (None: only all of it)."""

    def usable(self, length: int) -> bool:
        return length == len(self.tokens) or (self.floor is not None and self.floor <= length < len(self.tokens))


class PrefixStore:
    """A small LRU of caches keyed by exactly the tokens they hold: finished requests, and
    prompt-end checkpoints of models whose caches cannot be cut back."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0

    def add(self, tokens: Sequence[int], caches: LayerCaches) -> None:
        if self.capacity <= 0 or not tokens:
            return
        entry = _Entry(tuple(tokens), caches, cut_floor(caches, len(tokens)))
        for key, old in list(self._entries.items()):
            if old.tokens[: len(entry.tokens)] == entry.tokens and old.usable(len(entry.tokens)):
                return  # an entry already gives these tokens
            if entry.tokens[: len(old.tokens)] == old.tokens and entry.usable(len(old.tokens)):
                del self._entries[key]  # the new entry gives the old one's tokens too
        self._entries[self._next] = entry
        self._next += 1
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def lookup(self, prompt: Sequence[int]) -> tuple[int, LayerCaches | None]:
        """(reused length, caches) for the longest stored prefix of ``prompt`` that can be
        restored. At least the last prompt token is left to prefill: its logits start decoding."""
        best_key, best = self._longest(prompt, len(prompt) - 1)
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        entry = self._entries[best_key]
        return best, [cut(c, best, len(entry.tokens)) for c in entry.caches]

    def peek(self, tokens: Sequence[int], limit: int) -> tuple[int, LayerCaches | None]:
        """(length, caches) for the longest stored prefix of ``tokens`` of at most ``limit``
        tokens that can be restored, for a reader beside the scheduler (the logit lens):
        copies as :meth:`lookup` gives, and the LRU order left as it is, so reading changes
        neither an entry nor which entry the scheduler keeps."""
        best_key, best = self._longest(tokens, limit)
        if best_key is None:
            return 0, None
        entry = self._entries[best_key]
        return best, [cut(c, best, len(entry.tokens)) for c in entry.caches]

    def _longest(self, tokens: Sequence[int], limit: int) -> tuple[int | None, int]:
        best_key, best = None, 0
        for key, entry in self._entries.items():
            n = min(common_prefix(entry.tokens, tokens), limit)
            if n > best and entry.usable(n):
                best_key, best = key, n
        return best_key, best

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
