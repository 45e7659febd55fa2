"""Structured output, as a reply reports it (MLX-free: the app, the store and the CLI read it).

Each token generated (or scored) under a grammar records what the grammar did at that step:
how many tokens it allowed, how much probability it took from the distribution entering it
and from ``raw``, the model's own most likely token where the grammar removed it, and
whether the output was complete under the grammar after the token. A reply sums those.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GrammarRecord:
    """What the grammar did at one output token."""

    allowed: int
    """Tokens the grammar allowed at this step (the whole vocabulary once it was left)."""
    removed: float
    """Probability mass it removed from the distribution entering it, in [0, 1]."""
    removed_raw: float
    """Probability mass of ``raw`` (the model's own distribution) on the tokens it forbade."""
    wanted: int | None
    """``raw``'s most likely token when the grammar removed it (it overrode the model); None
    when the model's first choice was allowed."""
    left: bool = False
    """A forced token the grammar forbids came at or before this one (a branch's, a scored
    text's): the grammar keeps every token from there on."""
    accepting: bool = False
    """The output up to and including this token is complete under the grammar."""

    @property
    def forced(self) -> bool:
        """Only one token was allowed: the grammar, not the model, chose it."""
        return self.allowed == 1

    @property
    def overridden(self) -> bool:
        return self.wanted is not None


@dataclass(frozen=True, slots=True)
class GrammarStats:
    """A reply's structured output, summed (the CLI's ``done`` record, the app's status)."""

    tokens: int
    removed_raw: float
    """Σ of each token's ``removed_raw``: the mass of the model's own distributions the
    grammar took away along the reply."""
    log_kept: float
    """Σ log(1 − removed_raw): the log-probability that the model, unconstrained, would have
    stayed inside the grammar at every step of this reply."""
    overrides: int
    forced: int
    complete: bool
    """The reply as it ended is complete under the grammar."""
    left_at: int | None
    """The output index of the first forced token the grammar forbade; None: never left."""

    def plus(self, index: int, record: GrammarRecord) -> GrammarStats:
        kept = 1.0 - record.removed_raw
        return GrammarStats(
            self.tokens + 1,
            self.removed_raw + record.removed_raw,
            self.log_kept + (math.log(kept) if kept > 0 else -math.inf),
            self.overrides + record.overridden,
            self.forced + record.forced,
            record.accepting,
            self.left_at if self.left_at is not None or not record.left else index,
        )


NO_GRAMMAR_STATS = GrammarStats(0, 0.0, 0.0, 0, 0, False, None)


# The token record's "grammar" object (engine.api.codec) ---------------------------------


def encode_grammar(record: GrammarRecord, number: Callable[[float | None], float | None]) -> dict[str, Any]:
    """``number``: the codec style's rounding."""
    return {
        "allowed": record.allowed,
        "removed": number(record.removed),
        "removed_raw": number(record.removed_raw),
        "forced": record.forced,
        "wanted": record.wanted,
        "left": record.left,
        "accepting": record.accepting,
    }


def decode_grammar(data: Mapping[str, Any] | None) -> GrammarRecord | None:
    """The record back (``forced`` is derived, not read)."""
    if data is None:
        return None
    wanted = data.get("wanted")
    return GrammarRecord(
        allowed=int(data["allowed"]),
        removed=float(data["removed"]),
        removed_raw=float(data["removed_raw"]),
        wanted=None if wanted is None else int(wanted),
        left=bool(data.get("left", False)),
        accepting=bool(data.get("accepting", False)),
    )


def grammar_fields(stats: GrammarStats | None, spec: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``done`` record's grammar figures (none without a grammar); ``spec``: the
    request's ``(kind, text)``, where the writer knows it, so that the records alone let a
    reader rebuild the matcher and redo every step's kept set."""
    if stats is None:
        return {}
    written = {"kind": spec[0], "text": spec[1]} if len(spec) == 2 else {}
    return {
        "grammar": {
            **written,
            "tokens": stats.tokens,
            "removed_raw": round(stats.removed_raw, 6),
            "log_kept": round(stats.log_kept, 6) if math.isfinite(stats.log_kept) else None,
            "overrides": stats.overrides,
            "forced": stats.forced,
            "complete": stats.complete,
            "left_at": stats.left_at,
        }
    }
