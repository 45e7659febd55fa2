"""The sampling stages, one module each, registered by name.

Adding a stage: a module here with a pure ``apply`` over ``[B, V]`` and its
``Stage``, its parameters in :class:`engine.params.SamplingParams` (and its name in
``SAMPLER_STAGES``), and an entry below.
"""

from __future__ import annotations

from engine.params import SamplingParams
from engine.stages import bias, dry, min_p, penalties, temperature, top_k, top_n_sigma, top_p, typical_p, xtc
from engine.stages.base import Stage

STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        bias.STAGE,
        penalties.STAGE,
        dry.STAGE,
        temperature.STAGE,
        top_k.STAGE,
        top_p.STAGE,
        min_p.STAGE,
        typical_p.STAGE,
        top_n_sigma.STAGE,
        xtc.STAGE,
    )
}


def row_chain(params: SamplingParams) -> tuple[str, ...]:
    """The stages that run for one row, in order (``raw`` not included): ``bias`` first
    when set, then the ``samplers`` order, leaving out stages that are off."""
    order = ("bias", *params.samplers)
    return tuple(name for name in order if STAGES[name].active(params))


__all__ = ["STAGES", "Stage", "row_chain"]
