"""Figures 9 and 10: what the stage chain costs.

9. A decode step with every stage on against the same step with the classic chain
   (penalties, temperature, top-k, top-p, min-p), batch 1 and 8, on the default model;
   and each stage's own cost on [B, V] logits (the stage plus its inspection data).
10. DRY at histories of 100 / 1,000 / 4,000 tokens: the step with DRY on over off, and
    the host time of the DRY state per step (accept + penalties), beside llama.cpp's
    approach of recomputing the repeat lengths every step (same O(N) order).
"""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np

from bench.common import PROMPT, median, no_eos
from bench.sampling_cost import _scheduler_at_history, _steady_step
from engine.api.params import SAMPLER_STAGES, SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler
from engine.sampling.batch import new_states, state_inputs
from engine.sampling.inspection import pack_step
from engine.sampling.sampler import columns, run_chain
from engine.stages.base import Rows, StateContext
from engine.stages.dry_state import Breakers, DryRow
from engine.stages.vocabulary import Vocabulary

CLASSIC = {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1}
EVERY_STAGE = {
    **CLASSIC,
    "dry_multiplier": 0.8,
    "xtc_probability": 0.5,
    "xtc_threshold": 0.1,
    "typical_p": 0.95,
    "top_n_sigma": 2.0,
    "dynatemp_range": 0.3,
}


SAMPLED = {"temperature": 0.7, "top_k": 40, "top_p": 0.9}
"""The common sampled chain, against greedy (figure 9's second goal)."""

GOALS = {"every_over_classic": 1.10, "sampled_over_greedy": 1.10}


def _prefilled(loaded: LoadedModel, size: int, settings: dict) -> Scheduler:
    words = PROMPT.split()
    scheduler = Scheduler(loaded, max_batch_size=size, prefill_chunk=512)
    for i in range(size):
        params = SamplingParams(seed=i, max_tokens=10_000, logit_bias=no_eos(loaded), **settings)
        scheduler.insert(loaded.tokenizer.encode(" ".join(words[i % 5 :])), params)
    while len(scheduler._active) < size:
        scheduler.step()
    scheduler.step()
    return scheduler


def _interleaved_steps(
    loaded: LoadedModel, size: int, chains: dict[str, dict], steps: int, rounds: int | None = None
) -> dict:
    """Median step seconds of each chain, its schedulers stepped in turn (``rounds`` times
    ``steps`` each; by default a round per chain), so load that comes and goes falls on
    every chain alike. Each round starts one chain later, so every chain follows every
    other: in one fixed order the sampled chain, stepped right after greedy, read 1.159 of
    it where the other orders read 1.068 and 1.093 (default model, batch 1)."""
    schedulers = {name: _prefilled(loaded, size, settings) for name, settings in chains.items()}
    times: dict[str, list[float]] = {name: [] for name in chains}
    names = list(schedulers)
    for first in range(rounds if rounds is not None else len(names)):
        at = first % len(names)
        for name in names[at:] + names[:at]:
            times[name].append(_steady_step(schedulers[name], steps))
    for scheduler in schedulers.values():
        for request_id in scheduler.request_ids():
            scheduler.cancel(request_id)
        scheduler.step()
    return {name: median(values) for name, values in times.items()}


def _stage_alone(stage: str, size: int, vocab: int, repeats: int = 15) -> float:
    """Seconds one stage adds to a step: its apply and its inspection data, on [B, V] logits."""
    params = [SamplingParams(seed=i, **EVERY_STAGE) for i in range(size)]
    logits = mx.random.normal((size, vocab), key=mx.random.key(0)) * 3

    def once(chain: tuple[str, ...]) -> float:
        inputs = columns(params, chain)
        # Every stateful stage's own state for an empty history (its inputs' shapes).
        states = new_states(StateContext(Vocabulary(vocab)), params, [[]] * size, [None] * size)
        inputs.update(state_inputs(states, chain, params, Rows(list(range(size)), None), [0] * size))
        start = time.perf_counter()
        result = run_chain(logits, chain, inputs)
        mx.eval(pack_step(result, 10, inputs))
        return time.perf_counter() - start

    chain = (stage,) if stage else ()
    once(chain)  # compile
    return median([once(chain) for _ in range(repeats)])


def chain_cost(loaded: LoadedModel, sizes=(1, 8), steps: int = 5) -> dict:
    rows = {}
    chains = {"greedy": {}, "sampled": SAMPLED, "classic": CLASSIC, "every": EVERY_STAGE}
    for size in sizes:
        step = _interleaved_steps(loaded, size, chains, steps)
        classic, every = step["classic"], step["every"]
        empty = _stage_alone("", size, loaded.vocab_size)
        stages = {
            name: round(1000 * max(0.0, _stage_alone(name, size, loaded.vocab_size) - empty), 2)
            for name in SAMPLER_STAGES
        }
        rows[str(size)] = {
            "classic_step_ms": round(1000 * classic, 1),
            "every_stage_step_ms": round(1000 * every, 1),
            "ratio": round(every / classic, 3),
            "greedy_step_ms": round(1000 * step["greedy"], 1),
            "sampled_step_ms": round(1000 * step["sampled"], 1),
            "sampled_over_greedy": round(step["sampled"] / step["greedy"], 3),
            "stage_ms": stages,
            "no_stage_ms": round(1000 * empty, 2),
        }
    return {
        "model": loaded.name,
        "classic": CLASSIC,
        "every_stage": EVERY_STAGE,
        "sampled": SAMPLED,
        "by_batch": rows,
        "goal": GOALS,
    }


def _dry_host_cost(history: list[int], params: SamplingParams, steps: int = 20) -> float:
    """Host seconds per step of the DRY state: one accept and one penalties call."""
    row = DryRow(history, Breakers(frozenset()))
    rng = np.random.default_rng(0)
    times = []
    for _ in range(steps):
        token = int(rng.choice(history[-50:]))
        start = time.perf_counter()
        row.accept(token)
        row.penalties(params)
        times.append(time.perf_counter() - start)
    return median(times)


def dry_cost(loaded: LoadedModel, histories=(100, 1000, 4000), steps: int = 10) -> dict:
    rows = {}
    base = SamplingParams(temperature=0.7, max_tokens=10_000, top_logprobs=10, logit_bias=no_eos(loaded))
    dry = base.with_changes(dry_multiplier=0.8)
    for history in histories:
        off = _steady_step(_scheduler_at_history(loaded, history, base), steps)
        on_scheduler = _scheduler_at_history(loaded, history, dry)
        on = _steady_step(on_scheduler, steps)
        # A repetitive history: DRY has repeats to find at every step.
        pattern = list(range(100, 100 + 37)) * (history // 37 + 1)
        rows[str(history)] = {
            "step_ms_off": round(1000 * off, 2),
            "step_ms_dry": round(1000 * on, 2),
            "ratio": round(on / off, 3),
            "dry_host_ms": round(1000 * _dry_host_cost(pattern[:history], dry), 3),
        }
    return {"model": loaded.name, "dry_penalty_last_n": "whole context (-1)", "by_history": rows}
