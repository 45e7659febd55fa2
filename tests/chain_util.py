"""Run the stage chain on given logits the way the scheduler does, for engine tests."""

from __future__ import annotations

import mlx.core as mx

from engine.params import SamplingParams
from engine.sampler import ChainResult, columns, group_chain, run_chain


def run(
    logits,
    params: list[SamplingParams],
    counts: mx.array | None = None,
    bias: mx.array | None = None,
    noise: mx.array | None = None,
    extra: dict | None = None,
) -> ChainResult:
    """One step for rows that share a stage order; state inputs default to neutral."""
    logits = mx.array(logits) if not isinstance(logits, mx.array) else logits
    chain = group_chain(params)
    inputs = columns(params, chain)
    shape = logits.shape
    inputs["counts"] = counts if counts is not None else mx.zeros(shape, mx.int32)
    inputs["bias"] = bias if bias is not None else mx.zeros(shape, mx.float32)
    inputs["dry"] = mx.zeros(shape, mx.float32)
    inputs["xtc_coin"] = mx.zeros((shape[0], 1), mx.float32)
    inputs.update(extra or {})
    needed = {"greedy"} | {k for k in inputs if k not in ("counts", "bias", "dry", "xtc_coin")}
    needed |= {k for name in chain for k in _state(name)}
    return run_chain(logits, chain, {k: v for k, v in inputs.items() if k in needed}, noise)


def _state(name: str) -> tuple[str, ...]:
    from engine.stages import STAGES

    return STAGES[name].state
