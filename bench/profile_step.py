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
from engine.api.params import SamplingParams
from engine.runtime.scheduler import Scheduler
from engine.sampling.unpack import to_host


def greedy(loaded) -> SamplingParams:
    """The default chain (greedy) with ten candidates, EOS banned so the reply runs on."""
    return SamplingParams(max_tokens=10_000, top_logprobs=10, logit_bias={t: -100.0 for t in loaded.eos_token_ids})


def profile(loaded, batch: int, repeats: int = 7, prompt_ids: list[int] | None = None) -> dict:
    # No speculative decode: it launches the next forward pass inside step(), which the next
    # "forward" measurement would then wait for (two passes counted as one, a step as less).
    scheduler = Scheduler(loaded, max_batch_size=batch, prefill_chunk=512, sample_ahead=False)
    words = PROMPT.split()
    for i in range(batch):
        ids = prompt_ids if prompt_ids is not None else loaded.tokenizer.encode(" ".join(words[i % 5 :]))
        scheduler.insert(ids, row_params(i, loaded, 10_000) if prompt_ids is None else greedy(loaded))
    while len(scheduler._active) < batch:
        scheduler.step()
    for _ in range(2):
        scheduler.step()
    parts: dict[str, list[float]] = {k: [] for k in ("forward", "sample_and_pack", "transfer", "host", "full_step")}
    requests = scheduler._active
    sampling = scheduler._sampling
    counters = sampling.counters()
    for _ in range(repeats):
        inputs = mx.array([[r.generated[-1]] for r in requests])
        t0 = time.perf_counter()
        logits = scheduler.model(inputs, cache=scheduler._batch)[:, -1, :]
        mx.eval(logits)
        t1 = time.perf_counter()
        sampled = sampling.sample(logits, [r.next_index for r in requests])
        mx.eval(sampled.tokens, sampled.packed)
        t2 = time.perf_counter()
        packed = to_host(sampled.packed)
        t3 = time.perf_counter()
        sampled.unpack_all(packed, [r.params.top_logprobs for r in requests], scheduler.text.piece, counters)
        for request in requests:
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
