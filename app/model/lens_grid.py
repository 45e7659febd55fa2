"""What the inspector's Layers tab shows of one position of the logit lens, Qt-free: the
heat map's grid (layers × candidates), the curves under it, and the header's words.

The columns are the last layer's most likely tokens (the reply's distribution under ``raw``)
plus the chosen token when it is not among them; a cell is that token's probability at that
layer. The engine reports each layer's ``TOP`` most likely tokens, and at every layer the
probabilities of the last layer's ``TOP`` and of the chosen token
(``LensLayer.final_top_logprobs``, ``chosen_logprob``), so every column has a number at every
layer. A row without them (read before they existed) shows a candidate outside a layer's
list as below its last entry (``floors``), never with a made-up number.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.model.textfmt import visible

COLUMNS = 10
"""The last layer's most likely tokens shown as columns (the chosen one is added if not among them)."""
RUNS_NAMED = 3
"""The header names at most this many stretches of layers that preferred another token."""


@dataclass(frozen=True)
class LensGrid:
    tokens: tuple[int, ...]
    """Each column's token id."""
    labels: tuple[str, ...]
    """Each column's token text, whitespace made visible."""
    chosen_column: int
    probs: np.ndarray
    """``[L + 1, columns]``: row ``l`` is layer ``l``'s probability; NaN where the token is not in
    that layer's list (then below ``floors[l]``)."""
    floors: np.ndarray
    """``[L + 1]``: the probability of each layer's last listed token."""
    tops: tuple[tuple[int, float], ...]
    """Each layer's most likely token and its probability."""
    top_labels: tuple[str, ...]
    entropy: np.ndarray
    kl_final: np.ndarray
    rank_chosen: tuple[int, ...]
    chosen: int
    decided_at: int | None

    @property
    def layers(self) -> int:
        """L: the last layer's number (layer 0 is the embedding output)."""
        return len(self.tops) - 1


def lens_grid(row: Any, piece: Callable[[int], str], columns: int = COLUMNS) -> LensGrid:
    """The grid of ``row`` (an ``engine.api.results.LensPosition``), token texts from ``piece``."""
    layers = row.layers
    tokens = [t for t, _ in layers[-1].top[:columns]]
    if row.chosen not in tokens:
        tokens.append(row.chosen)
    probs = np.full((len(layers), len(tokens)), np.nan)
    floors = np.zeros(len(layers))
    finals = [t for t, _ in layers[-1].top]
    for k, layer in enumerate(layers):
        listed = dict(layer.top)
        listed.update(zip(finals, getattr(layer, "final_top_logprobs", ()), strict=False))
        for c, token in enumerate(tokens):
            logprob = layer.chosen_logprob if token == row.chosen else listed.get(token)
            if logprob is not None:
                probs[k, c] = math.exp(logprob)
        floors[k] = math.exp(layer.top[-1][1]) if layer.top else 0.0
    tops = tuple((layer.top[0][0], math.exp(layer.top[0][1])) for layer in layers)
    return LensGrid(
        tokens=tuple(tokens),
        labels=tuple(visible(piece(t)) for t in tokens),
        chosen_column=tokens.index(row.chosen),
        probs=probs,
        floors=floors,
        tops=tops,
        top_labels=tuple(visible(piece(t)) for t, _ in tops),
        entropy=np.array([layer.entropy for layer in layers]),
        kl_final=np.array([layer.kl_final for layer in layers]),
        rank_chosen=tuple(layer.rank_chosen for layer in layers),
        chosen=row.chosen,
        decided_at=row.decided_at,
    )


def decided_words(grid: LensGrid) -> str:
    """When the chosen token became the model's top choice for good, in words — and the
    earlier layers where it already led but was overtaken again, if any."""
    decided, layers = grid.decided_at, grid.layers
    if decided == 0:
        return f"decided at layer 0 of {layers} (the embedding): every layer ranks it first"
    if decided is None:
        words = (
            f"never decided: not the most likely token even at the last layer "
            f"(#{grid.rank_chosen[-1]} there, after “{grid.top_labels[-1]}”)"
        )
    elif decided == layers:
        words = f"decided at layer {layers} of {layers}, the last one"
    else:
        words = f"decided at layer {decided} of {layers}: the most likely token from layer {decided} on"
    led = [
        layer for layer in range(1, decided if decided is not None else layers) if grid.tops[layer][0] == grid.chosen
    ]
    if led:
        which = f"layer {led[0]}" if len(led) == 1 else f"layers {_spans(led)}"
        words += f"; it led at {which}, then was overtaken"
    return words


def _spans(layers: list[int]) -> str:
    """``[3, 4, 5, 9]`` → ``3–5, 9``."""
    spans: list[list[int]] = []
    for layer in layers:
        if spans and spans[-1][1] == layer - 1:
            spans[-1][1] = layer
        else:
            spans.append([layer, layer])
    return ", ".join(f"{a}–{b}" if a != b else str(a) for a, b in spans)


def other_tops(grid: LensGrid) -> list[tuple[str, int, int]]:
    """Stretches of consecutive layers whose most likely token is not the chosen one, as
    ``(token text, first layer, last layer)``, the deepest last; layer 0 (the embedding, which
    mostly predicts the input token itself) is left out."""
    runs: list[tuple[str, int, int]] = []
    for layer in range(1, len(grid.tops)):
        token = grid.tops[layer][0]
        if token == grid.chosen:
            continue
        label = grid.top_labels[layer]
        if runs and runs[-1][0] == label and runs[-1][2] == layer - 1:
            runs[-1] = (label, runs[-1][1], layer)
        else:
            runs.append((label, layer, layer))
    return runs


def other_tops_words(grid: LensGrid) -> str:
    """``other tokens led on the way: “ the” (layers 5–9), “,” (layer 12)`` — the deepest
    ``RUNS_NAMED`` stretches; "" when every layer but the embedding led with the chosen token."""
    runs = other_tops(grid)
    if not runs:
        return ""
    shown = runs[-RUNS_NAMED:]
    parts = [f"“{label}” (layers {a}–{b})" if a != b else f"“{label}” (layer {a})" for label, a, b in shown]
    more = f" and {len(runs) - len(shown)} more" if len(runs) > len(shown) else ""
    return "other tokens led on the way: " + ", ".join(parts) + more
