"""Figure 27: what a draft block costs as the history grows.

A block used to build every stage's state of every row from the whole history (penalties,
DRY, a grammar's matcher) and to draft its rows one at a time; the draft's state now rolls
forward with the kept tokens (``engine.runtime.draft_rows``). The figure runs one request,
the model drafting for itself (every proposal accepted: the most tokens a block gives), at
two lengths of history, with the penalties on (``penalties``) and with DRY on as well
(``penalties_dry``: DRY's own update is O(window) a token on both models, as llama.cpp's
is), and reports per block:

- ``draft_ms``: the draft's side of a block (its rows caught up, the proposals drawn, the
  state taken back and rolled forward), median over the blocks;
- ``model_ms``: of it, the draft model's own passes (timed to their logits, evaluated), which
  grow with the cache they attend over, as any decoder's do;
- ``state_ms``: the rest, ``draft_ms - model_ms``: the draft's sampling state, what rolling it
  forward is meant to keep flat;
- ``block_ms``: the whole step that ran the block (the target's pass and its draws too);
- ``rebuild_ms``: what making the draft's state afresh from that history costs once
  (``SamplingBatch.of``, what each block did before), for comparison.

Goal: with the penalties, ``state_ms`` at the longest history at most 1.2 times that at the
shortest (``draft_ratio`` is reported beside it: the model's passes grow it on any sampler).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx
import numpy as np

from bench.common import median, no_eos
from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.draft_rows import draft_params
from engine.runtime.scheduler import Scheduler
from engine.sampling.batch import SamplingBatch

GOALS = {"state_ratio_at_most": 1.2}


def _timed(spent: list[float], method: Callable[..., Any], evaluate: bool = False) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            out = method(*args, **kwargs)
            if evaluate:
                mx.eval(out)
            return out
        finally:
            spent.append(time.perf_counter() - start)

    return run


def _one(model: LoadedModel, prompt: list[int], params: SamplingParams, draft_tokens: int) -> dict[str, float]:
    scheduler = Scheduler(model, prefill_chunk=512)
    scheduler.set_draft(model, draft_tokens)
    rows = scheduler.drafter.rows
    spent: list[float] = []
    passes: list[float] = []
    for name in ("sync", "propose", "settle"):  # the draft's side of each block
        setattr(rows, name, _timed(spent, getattr(rows, name)))
    rows._logits = _timed(passes, rows._logits, evaluate=True)  # the draft model's passes within it
    scheduler.insert(prompt, params)
    blocks, draft, model_side = [], [], []
    while scheduler.has_work():
        spent.clear()
        passes.clear()
        start = time.perf_counter()
        events = scheduler.step()
        took = time.perf_counter() - start
        if any(isinstance(e, TokenStep) and e.draft is not None for e in events):
            blocks.append(took)
            draft.append(sum(spent))
            model_side.append(sum(passes))
    if len(blocks) < 3:
        raise RuntimeError(f"only {len(blocks)} blocks ran")
    # The first reads the prompt into the draft's caches.
    blocks, draft, model_side = blocks[1:], draft[1:], model_side[1:]
    state = [d - m for d, m in zip(draft, model_side, strict=True)]
    rebuild = []
    for _ in range(3):
        start = time.perf_counter()
        SamplingBatch.of(scheduler.vocabulary, draft_params(params), prompt)
        rebuild.append(time.perf_counter() - start)
    return {
        "block_ms": round(1000 * median(blocks), 3),
        "draft_ms": round(1000 * median(draft), 3),
        "model_ms": round(1000 * median(model_side), 3),
        "state_ms": round(1000 * median(state), 3),
        "rebuild_ms": round(1000 * median(rebuild), 3),
        "blocks": len(blocks),
    }


def draft_block_cost(
    model: LoadedModel, histories: tuple[int, ...] = (100, 4000), blocks: int = 24, draft_tokens: int = 3
) -> dict:
    """``model`` drafts for itself; each history is a prompt of that many tokens."""
    base = SamplingParams(
        max_tokens=blocks * (draft_tokens + 1) + 2,
        temperature=0.8,
        seed=3,
        repetition_penalty=1.1,
        presence_penalty=0.2,
        top_logprobs=10,
        logit_bias=no_eos(model),
    )
    width = min(model.vocab_size, 5000)
    out: dict[str, Any] = {}
    for name, params in (("penalties", base), ("penalties_dry", base.with_changes(dry_multiplier=0.8))):
        rng = np.random.default_rng(0)
        runs = {
            str(n): _one(model, [int(t) for t in rng.integers(10, width, n)], params, draft_tokens) for n in histories
        }
        short, long = runs[str(histories[0])], runs[str(histories[-1])]
        runs["draft_ratio"] = round(long["draft_ms"] / short["draft_ms"], 3)
        runs["state_ratio"] = round(long["state_ms"] / short["state_ms"], 3)
        runs["block_ratio"] = round(long["block_ms"] / short["block_ms"], 3)
        out[name] = runs
    out["goal"] = GOALS
    return out
