"""Figure 5: time to first token of a second chat turn, with prefix reuse and cold."""

from __future__ import annotations

from bench.common import first_token_time, median, run
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.prompts import encode_chat
from engine.runtime.scheduler import Scheduler

TURN1 = [{"role": "user", "content": "What is the capital of France?"}]


def prefix_reuse(loaded: LoadedModel, repeats: int = 2, reply_tokens: int = 12) -> dict:
    params = SamplingParams(max_tokens=reply_tokens)
    warm, cold, counts = [], [], {}
    for _ in range(repeats):
        scheduler = Scheduler(loaded, prefill_chunk=512)
        first = scheduler.insert(encode_chat(loaded.tokenizer, TURN1), params)
        events = run(scheduler)
        reply = next(e for e in events if isinstance(e, Finished) and e.request_id == first).text
        turn2 = TURN1 + [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "And what is the capital of Germany?"},
        ]
        prompt = encode_chat(loaded.tokenizer, turn2)
        second = scheduler.insert(prompt, params)
        warm.append(first_token_time(scheduler, second))
        warm_done = next(e for e in run(scheduler) if isinstance(e, Finished))
        fresh = Scheduler(loaded, prefill_chunk=512)
        again = fresh.insert(prompt, params)
        cold.append(first_token_time(fresh, again))
        cold_events = run(fresh)
        cold_done = next(e for e in cold_events if isinstance(e, Finished))
        counts = {
            "prompt_tokens": len(prompt),
            "prefilled_with_reuse": warm_done.prefilled_tokens,
            "prefilled_cold": cold_done.prefilled_tokens,
        }
        assert [isinstance(e, TokenStep) for e in cold_events]
    return {
        "ttft_warm_s": round(median(warm), 3),
        "ttft_cold_s": round(median(cold), 3),
        "ratio": round(median(warm) / median(cold), 3),
        **counts,
    }
