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

from app.textfmt import prob
from engine.events import TokenStep
from engine.params import SamplingParams

LAST_STAGE = "last stage"
"""The stage selector's default: each token's own last stage."""


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
        """Positions where the parameters differ from the token before."""

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
            self._p[i] = prob(step.logprob)
            self._argmax[i] = step.raw_argmax
            self.stages.update(step.chain)
            if i and step.params != steps[i - 1].params:
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
            values[i] = math.nan if k is None else step.entropies[k]
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


def change_label(before: SamplingParams, after: SamplingParams) -> str:
    names = params_diff(before, after)
    return ", ".join(names[:2]) + (f" +{len(names) - 2}" if len(names) > 2 else "")


def nearest(steps: list[TokenStep], x: float) -> int | None:
    """The position in ``steps`` of the token whose index is nearest ``x``."""
    if not steps:
        return None
    first = steps[0].index
    return max(0, min(len(steps) - 1, round(x) - first))
