"""Where a decode step's time goes: forward pass, sampling pipeline, inspection packing and
the host transfer, then host-side unpacking and detokenization.

    python -m bench.profile_step [--batch 1] [--synthetic]

Each part is evaluated on its own (``mx.eval`` between parts), so the parts add up to a
little more than a fused step.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import mlx.core as mx

from bench.common import PROMPT, default_model, median, row_params, synthetic_model
from engine.inspection import pack_step, to_host, unpack_row
from engine.sampler import RowParams, gumbel_noise, run_pipeline, step_key
from engine.scheduler import Scheduler


def profile(loaded, batch: int, repeats: int = 7) -> dict:
    scheduler = Scheduler(loaded, max_batch_size=batch, prefill_chunk=512)
    words = PROMPT.split()
    for i in range(batch):
        scheduler.insert(loaded.tokenizer.encode(" ".join(words[i % 5 :])), row_params(i, loaded, 10_000))
    while len(scheduler._active) < batch:
        scheduler.step()
    for _ in range(2):
        scheduler.step()
    parts: dict[str, list[float]] = {k: [] for k in ("forward", "pipeline", "pack_and_transfer", "host", "full_step")}
    requests = scheduler._active
    for _ in range(repeats):
        rows = RowParams.build([r.params for r in requests])
        inputs = mx.array([[r.generated[-1]] for r in requests])
        t0 = time.perf_counter()
        logits = scheduler.model(inputs, cache=scheduler._batch)[:, -1, :]
        mx.eval(logits)
        t1 = time.perf_counter()
        keys = [step_key(r.params.seed, r.next_index) for r in requests]
        noise = gumbel_noise(keys, logits.shape[-1])
        result = run_pipeline(logits, rows, scheduler._bias_for(requests), scheduler._counts.counts, noise)
        mx.eval(result.raw, result.biased, result.penalized, result.final, result.tokens)
        t2 = time.perf_counter()
        top_n = max(r.params.top_logprobs for r in requests)
        packed = to_host(pack_step(result, scheduler._counts.counts, top_n))
        t3 = time.perf_counter()
        for row, request in enumerate(requests):
            unpack_row(packed[row], top_n, request.params.top_logprobs, scheduler.text.piece)
            request.decoder.decode(request.generated[-4:])
        t4 = time.perf_counter()
        for cache in scheduler._batch:
            cache.trim(1)
        t5 = time.perf_counter()
        scheduler.step()
        t6 = time.perf_counter()
        for name, value in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t6 - t5), strict=True):
            parts[name].append(value)
    out = {name: round(1000 * median(values), 2) for name, values in parts.items()}
    out["model"] = loaded.name
    out["batch"] = batch
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--synthetic", action="store_true")
    args = parser.parse_args()
    if args.synthetic:
        loaded = synthetic_model(Path(tempfile.gettempdir()) / "logitscope-bench-synthetic")
    else:
        loaded = default_model()
    print(json.dumps(profile(loaded, args.batch)))


if __name__ == "__main__":
    main()
