"""Figures 3, 4 and 6: penalty cost against history length, the first step after a live
parameter change, and the share of a decode step spent outside the model's forward pass."""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from bench.common import PROMPT, median, no_eos, row_params
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler

PENALTIES = {"repetition_penalty": 1.2, "presence_penalty": 0.3, "frequency_penalty": 0.3}


def _steady_step(scheduler: Scheduler, steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        scheduler.step()
        times.append(time.perf_counter() - start)
    return median(times)


def _scheduler_at_history(loaded: LoadedModel, history: int, params: SamplingParams) -> Scheduler:
    rng = np.random.default_rng(history)
    prompt = [int(t) for t in rng.integers(100, loaded.vocab_size - 100, size=history)]
    scheduler = Scheduler(loaded, prefill_chunk=512)
    scheduler.insert(prompt, params)
    while not scheduler._active:
        scheduler.step()
    scheduler.step()  # first decode step: traces the pipeline variant
    return scheduler


def _peer_processor_cost(vocab: int, history: int, repeats: int = 20) -> float:
    """mlx-lm's processors rescan tokens[-context:] every step: their cost on one step."""
    processors = make_logits_processors(
        repetition_penalty=PENALTIES["repetition_penalty"],
        repetition_context_size=history,
        presence_penalty=PENALTIES["presence_penalty"],
        presence_context_size=history,
        frequency_penalty=PENALTIES["frequency_penalty"],
        frequency_context_size=history,
    )
    tokens = mx.array(np.random.default_rng(0).integers(0, vocab, size=history))
    logits = mx.random.normal((1, vocab), key=mx.random.key(0))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = logits
        for processor in processors:
            out = processor(tokens, out)
        mx.eval(out)
        times.append(time.perf_counter() - start)
    return median(times)


def penalty_cost(loaded: LoadedModel, histories=(100, 1000, 4000), steps: int = 12) -> dict:
    rows = {}
    base = SamplingParams(max_tokens=10_000, top_logprobs=10, penalty_window=0, logit_bias=no_eos(loaded))
    for history in histories:
        plain = _steady_step(_scheduler_at_history(loaded, history, base), steps)
        penalized = _steady_step(_scheduler_at_history(loaded, history, base.with_changes(**PENALTIES)), steps)
        rows[str(history)] = {
            "step_ms_none": round(1000 * plain, 2),
            "step_ms_penalties": round(1000 * penalized, 2),
            "ratio": round(penalized / plain, 3),
            "mlx_lm_processors_ms": round(1000 * _peer_processor_cost(loaded.vocab_size, history), 2),
        }
    return {"model": loaded.name, "window": "all (0)", "by_history": rows}


def live_change(loaded: LoadedModel, repeats: int = 3, steady_steps: int = 5) -> dict:
    prompt = loaded.tokenizer.encode(PROMPT)
    scheduler = Scheduler(loaded, prefill_chunk=512)
    params = SamplingParams(temperature=0.7, top_p=0.9, seed=1, max_tokens=10_000, logit_bias=no_eos(loaded))
    request = scheduler.insert(prompt, params)
    while not scheduler._active:
        scheduler.step()
    ratios, firsts, steadies = [], [], []
    for i in range(repeats):
        steady = _steady_step(scheduler, steady_steps)
        scheduler.update_params(request, params.with_changes(temperature=0.8 + 0.05 * i, top_p=0.95 - 0.02 * i))
        start = time.perf_counter()
        scheduler.step()
        first = time.perf_counter() - start
        ratios.append(first / steady)
        firsts.append(first)
        steadies.append(steady)
    scheduler.cancel(request)
    # mlx-lm: a sampler built for new Python values compiles again on its first call.
    logits = mx.random.normal((1, loaded.vocab_size), key=mx.random.key(1))
    peer_first, peer_steady = [], []
    for i in range(repeats):
        sampler = make_sampler(temp=0.8 + 0.05 * i, top_p=0.95 - 0.02 * i)
        start = time.perf_counter()
        mx.eval(sampler(logits))
        peer_first.append(time.perf_counter() - start)
        calls = []
        for _ in range(5):
            start = time.perf_counter()
            mx.eval(sampler(logits))
            calls.append(time.perf_counter() - start)
        peer_steady.append(median(calls))
    step = median(steadies)
    peer_ratio = (step + median(peer_first)) / (step + median(peer_steady))
    return {
        "ours_first_ms": round(1000 * median(firsts), 1),
        "ours_steady_ms": round(1000 * step, 1),
        "ratio": round(median(ratios), 3),
        "mlx_lm_sampler_first_ms": round(1000 * median(peer_first), 1),
        "mlx_lm_sampler_steady_ms": round(1000 * median(peer_steady), 2),
        "mlx_lm_ratio": round(peer_ratio, 3),
    }


def _forward_only(scheduler: Scheduler) -> float:
    """One forward pass of the running batch, then the cache is trimmed back."""
    inputs = mx.array([[r.generated[-1]] for r in scheduler._active])
    start = time.perf_counter()
    mx.eval(scheduler.model(inputs, cache=scheduler._batch))
    elapsed = time.perf_counter() - start
    for cache in scheduler._batch:
        cache.trim(1)
    return elapsed


def overhead(loaded: LoadedModel, sizes=(1, 8), steps: int = 5) -> dict:
    words = PROMPT.split()
    rows = {}
    for size in sizes:
        scheduler = Scheduler(loaded, max_batch_size=size, prefill_chunk=512)
        for i in range(size):
            scheduler.insert(loaded.tokenizer.encode(" ".join(words[i % 5 :])), row_params(i, loaded, 10_000))
        while len(scheduler._active) < size:
            scheduler.step()
        scheduler.step()
        forward = median([_forward_only(scheduler) for _ in range(steps)])
        step = _steady_step(scheduler, steps)
        rows[str(size)] = {
            "step_ms": round(1000 * step, 1),
            "forward_ms": round(1000 * forward, 1),
            "outside_forward_share": round(max(0.0, 1 - forward / step), 3),
        }
        for request_id in scheduler.request_ids():
            scheduler.cancel(request_id)
    return {"by_batch": rows}
