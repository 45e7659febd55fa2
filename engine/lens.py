"""The logit lens: each layer's residual stream read out as a next-token distribution.

For layer ``l`` (0 = the embedding output as the model scales it, the input of the first
block; ``l`` = 1 … L the stream after block ``l``) the distribution is
``softmax(head(final_norm(h_l)))``, ``head`` being the model's own unembedding with its
final-logit softcapping: the architecture's own code runs it (its ``model`` attribute is
swapped, for one call, for a stand-in returning ``final_norm(h_l)``), so tied and untied
embeddings and softcapping need no table here. The blocks are walked by wrapping each of
``model.model.layers`` for one forward pass (MoE blocks included). Layer L must reproduce
the model's raw logits (checked on every call); an architecture whose blocks cannot be
walked so is refused with its name.

Cost: one forward pass over the tokens up to the last position asked for, then one final
norm and one unembedding per layer and position (L + 1 of them for one position).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from engine.errors import EngineError
from engine.models import LoadedModel

NORM_NAMES = ("norm", "final_layernorm", "final_norm", "ln_f")
GROUP = 16
"""Positions read out together: (L + 1) × GROUP × V float32 values at a time."""


@dataclass(frozen=True, slots=True)
class LensLayer:
    position: int
    layer: int
    top: tuple[tuple[int, float], ...]
    """(token id, logprob), best first."""
    entropy: float
    kl_final: float
    """KL(final ‖ this layer) in nats, over the whole vocabulary."""
    rank_final_top1: int
    """Where the last layer's most likely token ranks here (1 = first)."""
    rank_chosen: int
    chosen_logprob: float


@dataclass(frozen=True, slots=True)
class LensPosition:
    position: int
    chosen: int
    """The text's next token, or the final top-1 where the text ends (the greedy choice)."""
    chosen_is_next: bool
    decided_at: int | None
    """The first layer from which ``chosen`` stays the most likely token; None: never."""
    layers: tuple[LensLayer, ...]


class _Recorder:
    """Stands in for one block for one call: runs it and keeps its output (and, for the
    first, its input: the embedding output)."""

    def __init__(self, block: Any, index: int, sink: dict[int, mx.array]) -> None:
        self._block, self._index, self._sink = block, index, sink

    def __call__(self, x, *args, **kwargs):
        if self._index == 0:
            self._sink[0] = x
        out = self._block(x, *args, **kwargs)
        self._sink[self._index + 1] = out[0] if isinstance(out, tuple) else out
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._block, name)


class _Fixed:
    """Stands in for the inner model for one call of the outer one: returns ``value``."""

    def __init__(self, inner: Any, value: mx.array) -> None:
        self._inner, self._value = inner, value

    def __call__(self, *args, **kwargs) -> mx.array:
        return self._value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _parts(loaded: LoadedModel) -> tuple[Any, list, Any]:
    model = loaded.model
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    norm = next((getattr(inner, n) for n in NORM_NAMES if inner is not None and hasattr(inner, n)), None)
    if inner is None or not isinstance(layers, list) or not layers or norm is None:
        arch = loaded.config.get("model_type", type(model).__name__)
        raise EngineError(f"the logit lens cannot walk the blocks of a {arch} model.")
    return inner, layers, norm


def hidden_states(loaded: LoadedModel, tokens: Sequence[int]) -> tuple[list[mx.array], mx.array]:
    """``([h_0 … h_L] each [T, D], logits [T, V])`` of one forward pass over ``tokens``."""
    inner, layers, _ = _parts(loaded)
    sink: dict[int, mx.array] = {}
    originals = list(layers)
    try:
        layers[:] = [_Recorder(b, i, sink) for i, b in enumerate(originals)]
        logits = loaded.model(mx.array(list(tokens))[None])
    finally:
        layers[:] = originals
    if len(sink) != len(originals) + 1:
        arch = loaded.config.get("model_type", "")
        raise EngineError(f"the logit lens cannot walk the blocks of a {arch} model (not every block ran).")
    return [sink[i][0] for i in range(len(originals) + 1)], logits[0]


def read_out(loaded: LoadedModel, h: mx.array) -> mx.array:
    """``head(final_norm(h))`` through the model's own head: logits ``[N, V]`` float32."""
    model = loaded.model
    inner, _, norm = _parts(loaded)
    normed = norm(h)[None]
    model["model"] = _Fixed(inner, normed)
    try:
        out = model(mx.zeros((1, normed.shape[1]), mx.int32))
    finally:
        model["model"] = inner
    return out[0].astype(mx.float32)


def lens(loaded: LoadedModel, tokens: Sequence[int], positions: Sequence[int], top: int = 10) -> Iterator[LensPosition]:
    """The lens at each of ``positions`` (indices into ``tokens``: the distribution of the
    token after it), a generator: stop iterating to cancel. One forward pass over
    ``tokens[: max(positions) + 1]``, then the read-outs, ``GROUP`` positions at a time."""
    tokens = [int(t) for t in tokens]
    if not tokens or not positions or any(not 0 <= p < len(tokens) for p in positions):
        raise EngineError(f"positions must be in [0, {len(tokens) - 1}], got {list(positions)[:5]}.")
    if not 1 <= top <= 100:
        raise EngineError(f"top must be in [1, 100], got {top}.")
    states, logits = hidden_states(loaded, tokens[: max(positions) + 1])
    positions = list(positions)
    for a in range(0, len(positions), GROUP):  # L + 1 distributions of V per position: a few at a time
        group = positions[a : a + GROUP]
        pos = mx.array(group)
        check = read_out(loaded, states[-1][pos])
        real = logits[pos].astype(mx.float32)
        if not mx.allclose(check, real, atol=1e-3, rtol=1e-3).item():
            arch = loaded.config.get("model_type", "")
            raise EngineError(f"the logit lens cannot walk a {arch} model: its last layer does not give its logits.")
        per_layer = [_logprobs(read_out(loaded, h[pos])) for h in states[:-1]] + [_logprobs(real)]
        for k, p in enumerate(group):
            yield _position(p, [lp[k].astype(np.float64) for lp in per_layer], tokens, top)


def _logprobs(logits: mx.array) -> np.ndarray:
    out = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    mx.eval(out)
    return np.array(out)


def _position(position: int, rows: list[np.ndarray], tokens: Sequence[int], top: int) -> LensPosition:
    final = rows[-1]
    final_top = int(np.argmax(final))
    nxt = position + 1 < len(tokens)
    chosen = int(tokens[position + 1]) if nxt else final_top
    p_final = np.exp(final)
    layers, tops = [], []
    for layer, lp in enumerate(rows):
        order = np.argsort(-lp, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(1, len(order) + 1)
        tops.append(int(order[0]))
        layers.append(
            LensLayer(
                position=position,
                layer=layer,
                top=tuple((int(i), float(lp[i])) for i in order[:top]),
                entropy=float(-(np.exp(lp) * lp).sum()),
                kl_final=max(0.0, float((p_final * (final - lp)).sum())),
                rank_final_top1=int(rank[final_top]),
                rank_chosen=int(rank[chosen]),
                chosen_logprob=float(lp[chosen]),
            )
        )
    decided = None
    for layer in range(len(tops) - 1, -1, -1):
        if tops[layer] != chosen:
            break
        decided = layer
    return LensPosition(position, chosen, nxt, decided, tuple(layers))
