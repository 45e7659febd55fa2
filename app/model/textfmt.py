"""Token text made visible: whitespace gets a glyph so it can be seen and clicked."""

from __future__ import annotations

import html
import math

VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}


def visible(text: str) -> str:
    """``' Paris'`` -> ``'␣Paris'``; an empty string shows as ``∅``."""
    if text == "":
        return "∅"
    return "".join(VISIBLE.get(ch, ch) for ch in text)


def prob(logprob: float | None) -> float:
    """0 for a removed token (-inf) and for one not reported (None: drawn like the lowest)."""
    return math.exp(logprob) if logprob is not None and math.isfinite(logprob) else 0.0


def percent(logprob: float | None) -> str:
    if logprob is None:
        return "not reported"
    p = prob(logprob)
    if p == 0.0:
        return "0 (removed)"
    if p < 0.001:
        return f"{p:.1e}"
    return f"{100 * p:.1f}%"


def escape(text: str) -> str:
    return html.escape(text, quote=True)
