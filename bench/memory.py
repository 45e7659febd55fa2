"""Figure 8: peak MLX memory of a 2,000-token generation, and growth over 50 requests."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from bench.common import PROMPT, no_eos, run
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler

MIB = 2**20


def memory(loaded: LoadedModel, long_tokens: int = 2000, requests: int = 50) -> dict:
    prompt = loaded.tokenizer.encode(PROMPT)
    scheduler = Scheduler(loaded, prefill_chunk=512)
    mx.clear_cache()
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    scheduler.insert(prompt, SamplingParams(max_tokens=long_tokens, top_logprobs=10, logit_bias=no_eos(loaded)))
    run(scheduler)
    peak = mx.get_peak_memory()
    active = []
    for i in range(requests):
        scheduler.insert(prompt, SamplingParams(max_tokens=16, temperature=0.8, seed=i, logit_bias=no_eos(loaded)))
        run(scheduler)
        mx.clear_cache()
        active.append(mx.get_active_memory())
    x = np.arange(len(active))
    slope = float(np.polyfit(x, np.array(active, dtype=float), 1)[0])
    # The prefix store fills up over the first requests (8 entries); after that, growth means a leak.
    settled = scheduler.prefix_store.capacity + 2
    slope_settled = float(np.polyfit(x[settled:], np.array(active[settled:], dtype=float), 1)[0])
    return {
        "model": loaded.name,
        "weights_and_state_mib": round(before / MIB, 1),
        "peak_mib_2000_tokens": round(peak / MIB, 1),
        "active_mib_first": round(active[0] / MIB, 1),
        "active_mib_last": round(active[-1] / MIB, 1),
        "slope_bytes_per_request": round(slope),
        "slope_bytes_per_request_after_store_full": round(slope_settled),
        "prefix_store_entries": len(scheduler.prefix_store),
    }
