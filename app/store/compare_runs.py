"""The compare runs the store saves, with their divergence, and the stream keys that name
token sequences (persistence's own types: the model layer above builds on them).

A *stream* is one sequence of tokens the app can show and select in: a saved branch
(``("branch", branch_id)``) or a reply being written (``("reply", reply_id)``). A token is
named by its stream and its index (:data:`TokenRef`), never by where it is drawn, so a
selection survives messages being added or removed around it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from engine.api.params import SamplingParams

StreamKey = tuple[str, int]
TokenRef = tuple[StreamKey, int]
"""(stream, index into that stream's steps); the index is also the TokenStep's own ``index``."""

COLUMN_NAMES = "ABCDEFGH"


def branch_key(branch_id: int) -> StreamKey:
    return ("branch", branch_id)


def reply_key(reply_id: int) -> StreamKey:
    return ("reply", reply_id)


@dataclass
class DivergenceSeries:
    """Per output index, the Jensen–Shannon divergence (nats) of each pair of columns'
    final distributions, and per pair the first index where their drawn tokens differ.

    Pairs are the column pairs ``(i, j)``, ``i < j``, in :attr:`pairs` order; a value is
    None where that pair was not measured at that index (one of them had finished).
    """

    columns: int
    index: list[int] = field(default_factory=list)
    js: list[list[float | None]] = field(default_factory=list)
    first_difference: dict[tuple[int, int], int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.first_difference = {pair: self.first_difference.get(pair) for pair in self.pairs}

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return list(combinations(range(self.columns), 2))

    def add(
        self,
        index: int,
        pairs: tuple[tuple[int, int], ...],
        js: tuple[float, ...],
        first_difference: tuple[int | None, ...],
    ) -> None:
        """One step of the group; ``pairs`` are column pairs."""
        order = {pair: k for k, pair in enumerate(self.pairs)}
        row: list[float | None] = [None] * len(order)
        for pair, value, first in zip(pairs, js, first_difference, strict=True):
            pair = (min(pair), max(pair))
            row[order[pair]] = float(value)
            if first is not None and self.first_difference.get(pair) is None:
                self.first_difference[pair] = int(first)
        if self.index and index <= self.index[-1]:
            where = self.index.index(index) if index in self.index else None
            if where is not None:
                self.js[where] = row
                return
        self.index.append(index)
        self.js.append(row)

    def mean(self) -> tuple[list[int], list[float]]:
        """The mean over the pairs measured at each index (NaN where none was)."""
        ys = []
        for row in self.js:
            values = [v for v in row if v is not None]
            ys.append(sum(values) / len(values) if values else math.nan)
        return list(self.index), ys

    def against(self, column: int) -> dict[int, list[float]]:
        """For each other column, its divergence from ``column`` per index (NaN: not measured)."""
        out: dict[int, list[float]] = {}
        for k, (a, b) in enumerate(self.pairs):
            if column in (a, b):
                other = b if a == column else a
                out[other] = [math.nan if row[k] is None else row[k] for row in self.js]
        return out

    def first(self) -> int | None:
        """The first index where any two columns drew different tokens."""
        found = [v for v in self.first_difference.values() if v is not None]
        return min(found) if found else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": 1,
            "columns": self.columns,
            "pairs": [list(p) for p in self.pairs],
            "index": list(self.index),
            "js": self.js,
            "first_difference": [self.first_difference.get(p) for p in self.pairs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DivergenceSeries:
        series = cls(int(data["columns"]), list(data["index"]), [list(r) for r in data["js"]])
        pairs = [tuple(p) for p in data["pairs"]]
        if pairs != series.pairs:
            raise ValueError(f"divergence pairs must be {series.pairs}, got {pairs}.")
        series.first_difference = dict(zip(series.pairs, data["first_difference"], strict=True))
        return series

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> DivergenceSeries:
        return cls.from_dict(json.loads(text))


@dataclass
class CompareColumn:
    label: str
    params: SamplingParams
    stream: StreamKey
    """The reply being written, then the branch it was saved as."""


@dataclass(eq=False)
class CompareRun:
    """One prompt (or one reply from a token on), N settings, one prefill: a column each.

    While it runs, its columns are replies; when the last one finishes every column is
    saved as a branch of ``message_id`` and the run itself (with its divergence) is stored.
    ``kept`` is the column chosen as the conversation's reply (None: not chosen yet, the
    columns are shown side by side).
    """

    message_id: int
    columns: list[CompareColumn]
    prefix_tokens: int = 0
    """Tokens of the reply kept before the fork ("compare from here"); 0 from the prompt."""
    divergence: DivergenceSeries = field(init=False)
    kept: int | None = None
    id: int | None = None
    """The store's id once saved."""
    group: int | None = None
    """The live group's id (the worker's tag for it) while it runs."""

    def __post_init__(self) -> None:
        self.divergence = DivergenceSeries(len(self.columns))

    @property
    def live(self) -> bool:
        return self.group is not None

    def column_of(self, stream: StreamKey) -> int | None:
        return next((i for i, c in enumerate(self.columns) if c.stream == stream), None)

    def label(self, column: int) -> str:
        return f"{COLUMN_NAMES[column]} · {self.columns[column].label}"
