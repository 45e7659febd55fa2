"""The texts scored last, so that a text sharing a beginning with one of them scores only the
rest: the choices of one multiple-choice item (an evaluation harness sends the context with
each choice, ``echo`` and ``max_tokens: 0``) prefill the shared context once.

A scored position's step depends only on the tokens up to it and the settings (the stages'
states are rebuilt from the text, ``engine.analysis.score``), and a plain ``KVCache`` never
rewrites a position it holds. So an entry is kept *while* its text is scored, chunk by
chunk, holding the scoring's own caches: a text sent beside it (the next choice, in the
same round of the serving loop) already finds the context its first chunk computed. A
taker gets copies cut to the shared length (``engine.caches.batch.cut``: slices, which the
entry's later writes never reach) and the steps as they were.

Only models whose every layer is a plain ``KVCache`` take part: a sliding window overwrites
what it held, recurrent state cannot be cut back, and a quantized cache converts at a token
that depends on the chunks (docs/ENGINE.md, "Quantized KV cache"), so their numbers would
depend on what was scored before."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mlx_lm.models.cache import KVCache

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.caches.batch import common_prefix, cut

CAPACITY = 8
"""Texts kept."""
MAX_TOKENS = 4096
"""Tokens kept in all (the oldest text goes first): each holds its caches."""


@dataclass(frozen=True)
class ScoreKey:
    """What besides the tokens a step depends on: the settings, where scoring starts and the
    index its steps count from (XTC's coin reads it)."""

    params: SamplingParams
    start: int
    index_offset: int


@dataclass
class ScoredText:
    """A text being scored or scored: its tokens so far, the steps of its positions from
    ``key.start``, and its caches holding every token but the last (``fed``)."""

    key: ScoreKey
    target: tuple[int, ...] = ()
    """The whole text it is scoring."""
    tokens: list[int] = field(default_factory=list)
    steps: list[TokenStep] = field(default_factory=list)
    caches: list = field(default_factory=list)
    live: bool = True
    """Being scored: it will hold more of ``target`` (False once done or stopped)."""

    @property
    def fed(self) -> int:
        return max(0, len(self.tokens) - 1)


@dataclass(frozen=True)
class Reused:
    """What a new text takes: ``fed`` tokens of caches (copies) and the steps of its
    positions ``key.start`` .. ``fed`` (none when only the context is shared)."""

    fed: int
    caches: list
    steps: list[TokenStep]


def plain(caches: Sequence) -> bool:
    """Whether every layer is a plain ``KVCache`` (no window, no recurrent state, no quantization)."""
    return bool(caches) and all(type(c) is KVCache for c in caches)


class ScoredTexts:
    """The last :data:`CAPACITY` texts scored under one model (a new model: a new store)."""

    def __init__(
        self,
        capacity: int = CAPACITY,
        max_tokens: int = MAX_TOKENS,
        finished: Callable[[Sequence[int], list], None] | None = None,
    ) -> None:
        """``finished(tokens, caches)``: called when a text is done, with its caches and the
        tokens they hold (all but its last), which no one writes to after."""
        self.capacity, self.max_tokens, self._finished = capacity, max_tokens, finished
        self._entries: OrderedDict[int, ScoredText] = OrderedDict()

    def take(self, key: ScoreKey, full: Sequence[int]) -> Reused | None:
        """The longest beginning of ``full`` a kept text under ``key`` gives, leaving at least
        its last position to compute when it is not all kept; None when there is none."""
        best, length = None, 0
        for entry in self._entries.values():
            if entry.key != key or not plain(entry.caches):
                continue
            n = common_prefix(entry.tokens, full)
            if n > length:
                best, length = entry, n
        # The caches must hold the tokens before the first position computed afresh: its
        # logits come from feeding the token before it.
        fed = min(length, len(full)) - 1
        if best is None or fed < 1:
            return None
        self._entries.move_to_end(id(best))
        steps = [s for s in best.steps if s.position <= fed]
        return Reused(fed, [cut(c, fed, best.fed) for c in best.caches], steps)

    def rounds_to_wait(self, key: ScoreKey, full: Sequence[int], chunk: int) -> int:
        """How many chunks of a text being scored beside ``full`` would give more of ``full``'s
        beginning than is kept now (0: none would). A scoring loop that advances its texts a
        chunk each in turn lets a new text wait that many turns before it starts: the choices
        of one request share their context instead of each computing it."""
        kept = max((common_prefix(e.tokens, full) for e in self._entries.values() if e.key == key), default=0)
        rounds = 0
        for entry in self._entries.values():
            if entry.live and entry.key == key and plain(entry.caches):
                more = min(common_prefix(entry.target, full), len(full)) - 1 - max(entry.fed, kept - 1)
                if more > 0:
                    rounds = max(rounds, -(-more // chunk) + 1)
        return rounds

    def begin(self, key: ScoreKey, caches: list, target: Sequence[int] = ()) -> ScoredText | None:
        """A text starting to be scored with ``caches`` (its own, written as it goes); None
        when such caches cannot take part."""
        if not plain(caches) or self.capacity <= 0:
            return None
        entry = ScoredText(key, tuple(target), caches=caches)
        self._entries[id(entry)] = entry
        self._evict()
        return entry

    def grow(self, entry: ScoredText, tokens: Sequence[int], steps: Sequence[TokenStep]) -> None:
        """``entry`` now holds ``tokens`` (its caches all but the last) and these steps more."""
        entry.tokens = list(tokens)
        entry.steps.extend(steps)
        if id(entry) in self._entries:
            self._evict()

    def done(self, entry: ScoredText) -> None:
        """``entry`` is scored whole: given to ``finished`` (the scheduler's prefix store: a
        reply to the same prompt then prefills only its last token)."""
        self.end(entry)
        if self._finished is not None and entry.fed > 0:
            self._finished(entry.tokens[: entry.fed], entry.caches)

    def end(self, entry: ScoredText) -> None:
        """``entry``'s scoring ended (done, stopped or failed): it holds what it got to."""
        entry.live = False

    def _evict(self) -> None:
        while len(self._entries) > self.capacity or (
            len(self._entries) > 1 and sum(len(e.tokens) for e in self._entries.values()) > self.max_tokens
        ):
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["CAPACITY", "MAX_TOKENS", "Reused", "ScoreKey", "ScoredText", "ScoredTexts", "plain"]
