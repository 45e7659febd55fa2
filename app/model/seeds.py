"""Every reply's seed is known, so every reply can be written again.

The engine draws a seed of its own for a request sent without one, but the app would not
know it until the first token came back, nor keep it with the reply's parameters. So a
reply sent with "random each reply" (seed None) gets its seed here, when it is sent: the
engine uses it, each ``TokenStep.params.seed`` records it, the saved branch keeps it, and
the chat shows it with a one-click "reuse". The draw depends only on the seed and the
token's index (``engine.sampling.sampler.step_key``): the same seed and settings write the same
reply again.
"""

from __future__ import annotations

import secrets

from app.model.scored import is_scored
from engine.api.events import TokenStep
from engine.api.params import SamplingParams

SEED_BITS = 31
"""As the sampling panel's Roll: at most ten digits, short enough to read and type."""


def with_seed(params: SamplingParams) -> SamplingParams:
    """``params`` with a concrete seed: its own, else a fresh one from the OS."""
    if params.seed is not None:
        return params
    return params.with_changes(seed=secrets.randbits(SEED_BITS))


def reply_seed(params: SamplingParams, steps: list[TokenStep]) -> int | None:
    """The seed a reply was written with: the one it was sent with, else (a reply saved
    before seeds were drawn at send) the seed its last token records. None for a scored
    text: it was given, not drawn, so no seed wrote it (its header showed one to reuse)."""
    if steps and is_scored(steps[0]):
        return None
    if params.seed is not None:
        return params.seed
    return steps[-1].params.seed if steps else None
