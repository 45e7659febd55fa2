"""One reply's per-token values for the timeline, kept in growing NumPy arrays.

A redraw while a reply streams converts only the tokens that arrived since the last
one (STYLE: events into buffers, ``setData`` on preallocated arrays), so its Python cost
does not grow with the reply. A different list of steps (another reply, a branch)
starts the series again. Also the labels of parameter changes, and the token nearest a
click.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from app.model.scored import shading_logprob
from app.model.textfmt import prob
from engine.api.events import TokenStep
from engine.api.params import SamplingParams

LAST_STAGE = "last stage"
"""The stage selector's default: each token's own last stage."""
UNMARKED = frozenset({"seed"})
"""Fields whose change alone is not marked: with "random each reply" every continuation
draws a new seed, so such a marker would stand at every picked token and say nothing about
the settings a person chose. A seed that changed with other fields is listed with them."""
MAX_LABEL_FIELDS = 2
"""Fields named on a marker's label; its tooltip lists them all."""
X_ROOM = 4
"""Tokens of room right of the last one while streaming (plus a fifth of the reply's length)."""
MIN_TOKENS = 10
"""A finished reply is shown at least this many tokens wide: a one-token reply is a dot at
the start of a short axis, not alone in the middle of an axis zoomed to fractions."""


class StreamSeries:
    def __init__(self) -> None:
        self.reset(None)

    def reset(self, steps: list[TokenStep] | None) -> None:
        self.steps = steps
        self.n = 0
        self._last: TokenStep | None = None
        self._x = np.empty(64)
        self._p = np.empty(64)
        self._argmax = np.empty(64, dtype=bool)
        self._entropy: dict[str, tuple[np.ndarray, int]] = {}
        self.stages: set[str] = set()
        self.changes: list[int] = []
        """Positions where the parameters differ from the token before (not the seed alone)."""

    @property
    def x(self) -> np.ndarray:
        return self._x[: self.n]

    @property
    def p(self) -> np.ndarray:
        return self._p[: self.n]

    @property
    def not_argmax(self) -> np.ndarray:
        return np.flatnonzero(~self._argmax[: self.n])

    def update(self, steps: list[TokenStep]) -> None:
        stale = steps is not self.steps or len(steps) < self.n or (self.n and steps[self.n - 1] is not self._last)
        if stale:
            self.reset(steps)
        if len(steps) == self.n:
            return
        start, end = self.n, len(steps)
        self._x, self._p, self._argmax = (_grown(a, end) for a in (self._x, self._p, self._argmax))
        for i in range(start, end):
            step = steps[i]
            self._x[i] = step.index
            self._p[i] = prob(shading_logprob(step))  # a scored text: raw, as its colours
            self._argmax[i] = step.raw_argmax
            self.stages.update(step.chain)
            if i and is_marked(steps[i - 1].params, step.params):
                self.changes.append(i)
        self.n, self._last = end, steps[-1]

    def entropies(self, stage: str) -> np.ndarray:
        """Each token's entropy after ``stage`` (NaN where it did not run); ``LAST_STAGE``:
        after its own last stage."""
        values, done = self._entropy.get(stage, (np.empty(64), 0))
        values = _grown(values, self.n)
        for i in range(done, self.n):
            step = self.steps[i]
            k = len(step.chain) - 1 if stage == LAST_STAGE else step.stage_index(stage)
            h = None if k is None else step.entropies[k]
            values[i] = math.nan if h is None else h  # NaN: a gap in the curve
        self._entropy[stage] = (values, self.n)
        return values[: self.n]


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    if size <= len(array):
        return array
    bigger = np.empty(max(size, 2 * len(array)), dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger


def params_diff(before: SamplingParams, after: SamplingParams) -> list[str]:
    """The names of the fields that differ (``samplers`` for a change of order)."""
    return [f.name for f in fields(SamplingParams) if getattr(before, f.name) != getattr(after, f.name)]


def is_marked(before: SamplingParams, after: SamplingParams) -> bool:
    """Whether a change from ``before`` to ``after`` is marked (not the seed alone)."""
    return before != after and not set(params_diff(before, after)) <= UNMARKED


def variant_applied(before: SamplingParams, after: SamplingParams) -> bool:
    """Whether ``after`` is ``before``'s ``think_variant`` taking over at the end of the
    thinking (``SamplingParams.answer_settings``: the request's seed where the variant has
    none, and its max_tokens)."""
    answer = before.answer_settings()
    return answer is not None and after == answer


def answer_base(before: SamplingParams) -> SamplingParams:
    """``before`` without what only the thinking had: what the answer's settings changed."""
    return before.with_changes(think_variant=None, thinking_budget=None)


def change_label(before: SamplingParams, after: SamplingParams) -> str:
    """A marker's short label: the first fields that changed, then how many more (a seed
    that changed with them is left to the tooltip); the answer's settings taking over say so."""
    if variant_applied(before, after):
        return f"answer settings: {change_label(answer_base(before), after) or 'the same'}"
    names = [name for name in params_diff(before, after) if name not in UNMARKED] or params_diff(before, after)
    extra = len(names) - MAX_LABEL_FIELDS
    return ", ".join(names[:MAX_LABEL_FIELDS]) + (f" +{extra}" if extra > 0 else "")


def token_range(x: np.ndarray, current: tuple[float, float] | None, streaming: bool) -> tuple[float, float]:
    """The first and last token index to show for tokens at ``x`` (not empty). Streaming: with
    room to grow into, moved only when a token passes its end (an axis whose range changes
    is drawn again, which at every token would cost more than the curves). Done: fitted,
    but at least ``MIN_TOKENS`` wide."""
    low, high = float(np.nanmin(x)), float(np.nanmax(x))
    if not streaming:
        return (low, max(high, low + MIN_TOKENS - 1))
    if current is not None and current[0] == low and high <= current[1] <= high + 2 * X_ROOM + (high - low) / 2:
        return current
    return (low, high + X_ROOM + (high - low) // 5)


def nearest(steps: list[TokenStep], x: float) -> int | None:
    """The position in ``steps`` of the token whose index is nearest ``x``."""
    if not steps:
        return None
    first = steps[0].index
    return max(0, min(len(steps) - 1, round(x) - first))
