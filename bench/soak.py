"""Soak: 1,000 sequential requests and 200 branch / compare cycles on a tiny model, each
reply saved to SQLite as the app saves it. Reported against request count: MLX active
memory, the Python heap (tracemalloc) and the database file size, as slopes over the
second half (once the prefix store and caches are full the goal is flat: 0 B/request for
memory; the file grows by what is saved).

    python -m bench.soak [--requests 1000] [--cycles 200] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path

import mlx.core as mx
import numpy as np

from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel, load
from engine.runtime.scheduler import Scheduler

PROMPTS = ["the cat sat on the mat", "a b c d e f", "hello there, how are you", "the theme of the thin thing"]


def _drain(scheduler: Scheduler) -> tuple[dict[int, list[TokenStep]], dict[int, Finished]]:
    steps: dict[int, list[TokenStep]] = {}
    done: dict[int, Finished] = {}
    while scheduler.has_work():
        for event in scheduler.step():
            if isinstance(event, TokenStep):
                steps.setdefault(event.request_id, []).append(event)
            elif isinstance(event, Finished):
                done[event.request_id] = event
    return steps, done


def _slope(values: list[float]) -> float:
    """Growth per request over the second half of the run."""
    half = len(values) // 2
    y = np.asarray(values[half:], dtype=float)
    return float(np.polyfit(np.arange(len(y)), y, 1)[0]) if len(y) > 2 else 0.0


def soak(loaded: LoadedModel, requests: int = 1000, cycles: int = 200, every: int = 10) -> dict:
    from app.store.store import Store

    folder = Path(tempfile.mkdtemp(prefix="logitscope-soak-"))
    store = Store(folder / "soak.sqlite3")
    conversation = store.writes.new_conversation("soak")
    scheduler = Scheduler(loaded)
    encode = loaded.tokenizer.encode
    samples: dict[str, list[float]] = {"mlx_active": [], "python_heap": [], "sqlite_bytes": []}
    tracemalloc.start()

    def save(rid: int, steps: dict, done: dict, after: int | None) -> int:
        user = store.writes.add_user_message(conversation.id, "soak", after)
        message = store.writes.add_assistant_message(conversation.id, user.id)
        params = steps[rid][0].params if steps.get(rid) else SamplingParams()
        branch = store.writes.add_branch(
            message.id, steps.get(rid, []), done[rid].text, done[rid].finish_reason, "tiny", params
        )
        return branch.id

    def sample() -> None:
        gc.collect()
        mx.clear_cache()
        samples["mlx_active"].append(mx.get_active_memory())
        samples["python_heap"].append(tracemalloc.get_traced_memory()[0])
        samples["sqlite_bytes"].append(sum(p.stat().st_size for p in folder.iterdir()))

    last_branch = None
    for i in range(requests):
        params = SamplingParams(max_tokens=12, temperature=0.8 + 0.1 * (i % 3), seed=i, top_k=40, top_logprobs=5)
        rid = scheduler.insert(encode(PROMPTS[i % len(PROMPTS)]), params)
        steps, done = _drain(scheduler)
        last_branch = save(rid, steps, done, last_branch if i % 20 else None)
        if i % every == 0:
            sample()
    requests_samples = {k: list(v) for k, v in samples.items()}
    for k in samples:
        samples[k].clear()
    for c in range(cycles):
        rid = scheduler.insert(encode(PROMPTS[c % len(PROMPTS)]), SamplingParams(max_tokens=10, seed=c))
        steps, done = _drain(scheduler)
        position = 3 + c % 5
        branch = scheduler.branch(rid, position, (steps[rid][position].token_id + 1) % loaded.vocab_size)
        variants = [SamplingParams(max_tokens=6, temperature=t, seed=c) for t in (0.5, 1.0, 1.5)]
        forks = scheduler.fork_from(rid, position, variants)
        more, finished = _drain(scheduler)
        for r in (branch, *forks):
            save(r, more, finished, None)
        if c % (every // 2 or 1) == 0:
            sample()
    tracemalloc.stop()
    store.close()
    out = {"model": loaded.name, "requests": requests, "cycles": cycles, "sample_every": every}
    for phase, data in (("requests", requests_samples), ("cycles", samples)):
        out[phase] = {
            "mlx_active_slope_bytes": round(_slope(data["mlx_active"]) / every),
            "python_heap_slope_bytes": round(_slope(data["python_heap"]) / every),
            "sqlite_slope_bytes": round(_slope(data["sqlite_bytes"]) / every),
            "mlx_active_mib": [round(data["mlx_active"][0] / 2**20, 2), round(data["mlx_active"][-1] / 2**20, 2)],
            "python_heap_mib": [round(data["python_heap"][0] / 2**20, 2), round(data["python_heap"][-1] / 2**20, 2)],
            "sqlite_mib": [round(data["sqlite_bytes"][0] / 2**20, 2), round(data["sqlite_bytes"][-1] / 2**20, 2)],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from tests.support.tiny_model import write_tiny_model

    folder = Path(tempfile.gettempdir()) / "logitscope-soak-model"
    if not (folder / "config.json").exists():
        write_tiny_model(folder)
    result = soak(load(str(folder)), args.requests, args.cycles)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
