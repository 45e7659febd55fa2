"""Run the stage chain on given logits the way the scheduler does, for engine tests."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.sampling.batch import new_states, state_inputs
from engine.sampling.sampler import ChainResult, columns, group_chain, run_chain
from engine.stages.base import Rows, StateContext
from engine.stages.vocabulary import Vocabulary


def fresh_state_inputs(params: list[SamplingParams], chain, vocab: int, index: int = 0) -> dict[str, mx.array]:
    """Every chain stage's state inputs as the stages' own states make them for an empty
    history (no breakers): the inputs of a stage no test supplies by hand."""
    rows = len(params)
    params = [p.with_changes(seed=0) if p.seed is None else p for p in params]  # XTC's coin reads the seed
    states = new_states(StateContext(Vocabulary(vocab)), params, [[]] * rows, [None] * rows)
    return state_inputs(
        states, [n for n in chain if n in states], params, Rows(list(range(rows)), None), [index] * rows
    )


def run(
    logits,
    params: list[SamplingParams],
    counts: mx.array | None = None,
    bias: mx.array | None = None,
    noise: mx.array | None = None,
    extra: dict | None = None,
) -> ChainResult:
    """One step for rows that share a stage order; state inputs default to neutral
    (zero counts and bias, XTC's coin 0, other stages' fresh state: DRY's of an empty history)."""
    logits = mx.array(logits) if not isinstance(logits, mx.array) else logits
    chain = group_chain(params)
    shape = logits.shape
    inputs = fresh_state_inputs(params, chain, shape[1])
    neutral = {
        "counts": counts if counts is not None else mx.zeros(shape, mx.int32),
        "bias": bias if bias is not None else mx.zeros(shape, mx.float32),
        "xtc_coin": mx.zeros((shape[0], 1), mx.float32),
    }
    inputs.update({k: v for k, v in neutral.items() if k in inputs})
    inputs.update(columns(params, chain))
    inputs.update(extra or {})
    return run_chain(logits, chain, inputs, noise)


def dry_inputs(penalty: np.ndarray) -> dict[str, mx.array]:
    """DRY's inputs for penalties the test has per token ([B, V] float32): every token an
    entry the row's last token counts (keyed 0, the last token 0; no breakers), as
    ``engine.stages.dry.DryRows`` sends the penalties the host has."""
    rows, vocab = penalty.shape
    column = mx.zeros((rows, 1), mx.int32)
    return {
        "dry_keys": mx.zeros((rows, vocab), mx.int32),
        "dry_tokens": mx.broadcast_to(mx.arange(vocab, dtype=mx.int32), (rows, vocab)),
        "dry_values": mx.array(penalty.astype(np.float32)),
        "dry_completers": mx.full((rows, 1), -1, mx.int32),
        "dry_set": column,
        "dry_last": column,
        "dry_breakers": mx.zeros((1, vocab), mx.bool_),
    }
