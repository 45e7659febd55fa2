"""Figure 11: compare N settings on one prompt.

Ours: ``Scheduler.fork`` prefills the prompt once and starts N variants from it. mlx-lm's
``BatchGenerator`` is given the N prompts with their samplers and processors and
prefills each. Reported per N: the time until every variant has its first token over
the time to first token of one request alone (each side against its own solo run), and
the aggregate decode tokens/s of the N variants, ours over mlx-lm's.
"""

from __future__ import annotations

import time

from mlx_lm.generate import BatchGenerator

from bench.common import PROMPT, median, peer_sampling, row_params
from engine.api.events import TokenStep
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler


def _ours(loaded: LoadedModel, prompt: list[int], n: int, steps: int) -> tuple[float, float]:
    """(seconds until all n variants have a token, decode tokens/s after that)."""
    scheduler = Scheduler(loaded, max_batch_size=max(n, 1), prefill_chunk=512)
    variants = [row_params(i, loaded, max_tokens=10_000) for i in range(n)]
    start = time.perf_counter()
    ids = set(scheduler.fork(prompt, variants))
    started: set[int] = set()
    while started != ids:
        started.update(e.request_id for e in scheduler.step() if isinstance(e, TokenStep))
    first = time.perf_counter() - start
    scheduler.step()
    start, produced = time.perf_counter(), 0
    for _ in range(steps):
        produced += sum(isinstance(e, TokenStep) for e in scheduler.step())
    rate = produced / (time.perf_counter() - start)
    for request_id in scheduler.request_ids():
        scheduler.cancel(request_id)
    return first, rate


def _peer(loaded: LoadedModel, prompt: list[int], n: int, steps: int) -> tuple[float, float]:
    pairs = [peer_sampling(row_params(i, loaded, max_tokens=10_000)) for i in range(n)]
    samplers, processors = [s for s, _ in pairs], [p for _, p in pairs]
    generator = BatchGenerator(loaded.model, max_tokens=10_000, completion_batch_size=n, prefill_batch_size=n)
    start = time.perf_counter()
    uids = set(generator.insert([prompt] * n, samplers=samplers, logits_processors=processors))
    started: set[int] = set()
    while started != uids:
        started.update(r.uid for r in generator.next_generated())
    first = time.perf_counter() - start
    generator.next_generated()
    start, produced = time.perf_counter(), 0
    for _ in range(steps):
        produced += len(generator.next_generated())
    rate = produced / (time.perf_counter() - start)
    generator.close()
    return first, rate


def compare(loaded: LoadedModel, sizes=(2, 4, 8), steps: int = 4, repeats: int = 2) -> dict:
    prompt = loaded.tokenizer.encode(PROMPT)
    for n in (1, *sizes):  # untimed: the first run at each batch size traces and compiles
        _ours(loaded, prompt, n, 1)
        _peer(loaded, prompt, n, 1)
    ours_alone = median([_ours(loaded, prompt, 1, 1)[0] for _ in range(repeats)])
    peer_alone = median([_peer(loaded, prompt, 1, 1)[0] for _ in range(repeats)])
    rows = {}
    for n in sizes:
        ours = [_ours(loaded, prompt, n, steps) for _ in range(repeats)]
        peer = [_peer(loaded, prompt, n, steps) for _ in range(repeats)]
        ours_first, peer_first = median([o[0] for o in ours]), median([p[0] for p in peer])
        ours_rate, peer_rate = median([o[1] for o in ours]), median([p[1] for p in peer])
        rows[str(n)] = {
            "ours_all_first_s": round(ours_first, 2),
            "ours_ratio_to_alone": round(ours_first / ours_alone, 3),
            "mlx_lm_all_first_s": round(peer_first, 2),
            "mlx_lm_ratio_to_alone": round(peer_first / peer_alone, 3),
            "ours_tps": round(ours_rate, 2),
            "mlx_lm_tps": round(peer_rate, 2),
            "tps_ratio": round(ours_rate / peer_rate, 3),
        }
    return {
        "prompt_tokens": len(prompt),
        "ours_alone_first_s": round(ours_alone, 2),
        "mlx_lm_alone_first_s": round(peer_alone, 2),
        "by_variants": rows,
    }
