"""What the engine's analyses hand back: frozen plain data, importable without MLX.

The app reads these on its GUI thread (the logit lens's positions, Check precision's rows and
summary, Compare models' rows and second model), so they live here rather than beside the MLX
code that makes them (``engine.analysis.lens``, ``engine.analysis.fidelity``,
``engine.analysis.kld``, ``engine.session.compare``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.api.precision import FIDELITY_TOLERANCE

# The logit lens (engine.analysis.lens) ----------------------------------------------------


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
    final_top_logprobs: tuple[float, ...] = ()
    """The logprobs here of the last layer's ``top`` tokens, in the last layer's order: how
    each final candidate fared at this layer, inside this layer's list or not."""


@dataclass(frozen=True, slots=True)
class LensPosition:
    position: int
    chosen: int
    """The text's next token, or the final top-1 where the text ends (the greedy choice)."""
    chosen_is_next: bool
    decided_at: int | None
    """The first layer from which ``chosen`` stays the most likely token; None: never."""
    layers: tuple[LensLayer, ...]


# Check precision (engine.analysis.fidelity) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenFidelity:
    index: int
    """0 for the first scored token (the text's second token)."""
    token_id: int
    kld: float
    """KL(float32 ‖ running precision) in nats, over the whole vocabulary."""
    top5_max_diff: float
    """The largest |logprob − float32's| over float32's top 5 tokens."""
    top_agrees: bool
    logprob: float
    """The text's token, in the running precision."""
    logprob_float32: float


@dataclass(frozen=True, slots=True)
class FidelitySummary:
    precision: str
    tokens: int
    kld_mean: float
    kld_max: float
    top5_max_diff: float
    top_agreement: float
    """Fraction of tokens whose top token is float32's."""
    tolerance: float = FIDELITY_TOLERANCE

    @property
    def within_tolerance(self) -> bool:
        return self.top5_max_diff <= self.tolerance


def summarize(precision: str, rows: Sequence[TokenFidelity]) -> FidelitySummary:
    kld = np.array([r.kld for r in rows], np.float64)
    return FidelitySummary(
        precision=precision,
        tokens=len(rows),
        kld_mean=float(kld.mean()) if rows else 0.0,
        kld_max=float(kld.max()) if rows else 0.0,
        top5_max_diff=max((r.top5_max_diff for r in rows), default=0.0),
        top_agreement=sum(r.top_agrees for r in rows) / len(rows) if rows else 1.0,
    )


# Compare models (engine.analysis.kld, engine.session.compare) -----------------------------


@dataclass(frozen=True, slots=True)
class TokenKLD:
    index: int
    """Position among the scored tokens, from 0."""
    token_id: int
    kld: float
    """KL(base ‖ model) in nats over the whole vocabulary, of the raw distributions."""
    same_top: bool
    logprob_base: float
    logprob_model: float
    top_base: tuple[tuple[int, float], ...]
    """The base's most likely tokens (id, logprob), best first."""
    top_model: tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class SecondModel:
    """What the app shows of the model a reply is compared with."""

    name: str
    source: str
    precision: str
    kv: str = "off"
    """Its KV cache (``KVQuantization.describe``): ``off``, ``8-bit (group 64)``, ..."""
