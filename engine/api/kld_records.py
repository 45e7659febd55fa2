"""The records of a model comparison: one ``token`` record per scored token and one
``summary``, as ``python -m engine kld`` prints them and the app exports them.

Plain shaping of :class:`engine.api.results.TokenKLD` rows (read by attribute, so this module
imports no MLX: the app's Compare models export uses it on the GUI thread). Numbers are
written as the floats they are (``engine.api.codec.STORE``'s numbers: ``null`` for what is not
finite, never rounded): two precisions of one model differ by KL divergences of 1e-7, which
the 5 decimals of a generation record would write as 0. The statistics are
:func:`engine.api.kld_stats.summarize`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.api.codec import STORE
from engine.api.kld_stats import summarize

Piece = Callable[[int], str]


def token_record(row: Any, piece: Piece) -> dict:
    """A ``TokenKLD`` as a ``token`` record; ``piece(token_id)`` names each token."""

    def top(entries) -> list[dict]:
        return [{"token_id": t, "text": piece(t), "logprob": STORE.number(lp)} for t, lp in entries]

    return {
        "type": "token",
        "index": row.index,
        "token_id": row.token_id,
        "text": piece(row.token_id),
        "kld": STORE.number(row.kld),
        "same_top": row.same_top,
        "p_base": STORE.number(math.exp(row.logprob_base)),
        "p_model": STORE.number(math.exp(row.logprob_model)),
        "logprob_base": STORE.number(row.logprob_base),
        "logprob_model": STORE.number(row.logprob_model),
        "top_base": top(row.top_base),
        "top_model": top(row.top_model),
    }


def statistics(rows: Sequence[Any]) -> dict:
    """:func:`engine.api.kld_stats.summarize` over ``TokenKLD`` rows, unrounded."""
    return summarize(
        [r.kld for r in rows],
        [-r.logprob_base for r in rows],
        [-r.logprob_model for r in rows],
        [r.same_top for r in rows],
    )


def summary_record(rows: Sequence[Any], about: Mapping[str, Any], interrupted: bool) -> dict:
    """The ``summary`` record: ``about`` (``base``, ``base_precision``, ``model``,
    ``precision``), the rounded statistics, and whether the comparison was cut short."""
    numbers = {k: rounded(v) for k, v in statistics(rows).items()}
    return {"type": "summary", **about, **numbers, "interrupted": interrupted}


def rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: STORE.number(v) for k, v in value.items()}
    if isinstance(value, float):
        return STORE.number(value)
    return value
