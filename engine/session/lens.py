"""The logit lens, from the app's side: a reply's or a scored text's tokens read out layer
by layer (:mod:`engine.analysis.lens`) under the running model.

Held by :class:`engine.session.session.EngineSession` (its ``lens_reply`` / ``lens_text``).
Positions are counted as the app counts them: index 0 is the distribution the reply's (or
the scored text's) first token was drawn from, so
:attr:`engine.api.results.LensPosition.position` and each layer's ``position`` are indices
into ``output`` / the scored tokens, as :class:`engine.api.results.TokenKLD`'s ``index``.

On demand from the cached prefix: the scheduler's :class:`engine.caches.batch.PrefixStore` keeps
finished requests' caches (and, for models whose caches cannot be cut back, a copy at the
end of each prompt). The lens continues a copy of the longest stored prefix ending before
the first position asked for (:meth:`PrefixStore.peek`: the entry and the store's LRU order
are left alone) and runs only the tokens from that position on, with the blocks wrapped.
What each cache kind allows:

- ``KVCache``: any shorter prefix is a slice: one position of a reply the session wrote
  costs one token's forward pass (plus the read-outs).
- ``RotatingKVCache`` (sliding windows): the same while the window has not wrapped; once it
  has, positions before the window were dropped and it is used only at exactly the tokens
  it holds (the prompt-end copy: every position but the reply's first).
- ``ArraysCache`` (recurrent state, as in qwen3_next, lfm2): cannot be rewound, so used only
  at exactly the tokens it holds, as a wrapped window.
- a quantized KV cache (``QuantizedKVCache``): never: its keys and values are rounded, and
  the lens reads the model with full-precision ones (a full pass).

Anything else is a full pass over the tokens; :attr:`LensReader.reuse` says which and
why. Safe between scheduler steps on the same thread: the copies are new cache objects over
MLX arrays (immutable: a write to a copy makes a new array), the swaps of the model's blocks
and head last one synchronous call each and are undone before anything is yielded, and the
store's LRU order is not touched, so the scheduler keeps and evicts exactly what it would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.analysis.lens import lens_continued
from engine.api.errors import EngineError
from engine.api.results import LensPosition
from engine.caches.batch import quantized_layers


@dataclass(frozen=True, slots=True)
class LensReuse:
    """What the last lens call took from the prefix store."""

    reused: int
    """Tokens a cached prefix gave (0: a full pass)."""
    why: str
    """Why no cached prefix was used; empty when one was."""


class LensReader:
    """Reads the lens under the running model; ``scheduler`` gives the running scheduler (its
    model, prefix store and cache kinds)."""

    def __init__(self, scheduler: Callable[[], Any]) -> None:
        self._scheduler = scheduler
        self.reuse = LensReuse(0, "no lens was read yet.")
        """What the last call took from the prefix store; set when it starts computing."""

    def read(
        self, context: list[int], targets: list[int], positions: Sequence[int] | None, top: int
    ) -> Iterator[LensPosition]:
        """The lens at ``positions`` of ``targets`` after ``context`` (None: every target), one
        :class:`LensPosition` each, in order, counted from the first target: a generator, stop
        iterating to cancel. ``len(targets)`` asks for the distribution after the last."""
        if not context:
            raise EngineError("the logit lens needs at least one prompt token.")
        wanted = list(range(len(targets))) if positions is None else [int(p) for p in positions]
        if not wanted or any(not 0 <= p <= len(targets) for p in wanted):
            raise EngineError(f"positions must be in [0, {len(targets)}], got {wanted[:5]}.")
        if sorted(set(wanted)) != wanted:
            raise EngineError("positions must be increasing and distinct.")
        tokens = list(context) + list(targets)
        offset = len(context) - 1
        return self._rows(tokens, [offset + p for p in wanted], top, offset)

    def _rows(self, tokens: list[int], at: list[int], top: int, offset: int) -> Iterator[LensPosition]:
        scheduler = self._scheduler()
        reused, caches, why = cached_prefix(scheduler.prefix_store, scheduler.cache_kinds, tokens, at[0])
        self.reuse = LensReuse(reused, why)
        for row in lens_continued(scheduler.loaded, tokens, at, top, reused, caches):
            yield _shift(row, offset)


def cached_prefix(
    store: Any, cache_kinds: Sequence[str], tokens: list[int], first: int
) -> tuple[int, list | None, str]:
    """``(length, caches, why)``: copies of the longest prefix of ``tokens`` in ``store``
    that ends before ``first`` (the layers at ``first`` need its token run), or ``(0, None,
    why not)``."""
    length, caches = store.peek(tokens, first)
    if caches is None:
        why = f"no cached prefix of these tokens ends before token {first}, the first asked for"
        if {"RotatingKVCache", "ArraysCache"} & set(cache_kinds):
            why += (
                " (a sliding window that has wrapped, or recurrent state, is used only at exactly the tokens it holds)"
            )
        return 0, None, why + "."
    if quantized_layers(caches):
        return 0, None, "the cached prefix is a quantized KV cache; the lens reads full-precision keys and values."
    return length, caches, ""


def _shift(row: LensPosition, offset: int) -> LensPosition:
    """``row`` with its positions counted from the reply's first token."""
    at = row.position - offset
    return replace(row, position=at, layers=tuple(replace(layer, position=at) for layer in row.layers))
