"""Figure 23: speculative decoding on a real pair, against mlx-lm's on the same pair.

The target is the default model (SmolLM2-135M Q4_1, computed in float32); the draft is the
same weights re-quantized to Q4_0 (``tools.requantize``, gguf-py's quantizer), the pair
the tests check too. Greedy, EOS banned, the same span on every side:

- ours without a draft, and with one (``Scheduler.set_draft``): tokens/s, the acceptance
  rate and the tokens per target pass from the reply's ``Finished.draft``;
- mlx-lm's ``stream_generate`` without and with ``draft_model`` on the same two loaded
  models: tokens/s (its ``from_draft`` flags give its acceptance).

A draft as large as its target cannot be faster on a CPU (the draft's passes cost what the
target's do): what the figure compares is the two engines' speculative decoding, the
acceptance, and what the draft costs against plain decoding.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from mlx_lm.generate import stream_generate
from mlx_lm.sample_utils import make_logits_processors

from bench.common import PROMPT, default_model, median, no_eos
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel, default_model_path, load
from engine.runtime.scheduler import Scheduler

GOALS = {"ratio_at_least": 1.0}
DRAFT_FOLDER = Path(tempfile.gettempdir()) / "logitscope-bench-draft"


def requantized_draft(target: str = "Q4_0") -> LoadedModel:
    """The default GGUF re-quantized to ``target`` (written once into the temporary folder)."""
    from tools.requantize import requantized

    return load(str(requantized(Path(default_model_path()), target, DRAFT_FOLDER)))


def _ours(target: LoadedModel, draft: LoadedModel | None, prompt: list[int], tokens: int, k: int) -> dict:
    scheduler = Scheduler(target, prefill_chunk=512)
    if draft is not None:
        scheduler.set_draft(draft, k)
    scheduler.insert(prompt, SamplingParams(max_tokens=tokens, top_logprobs=10, logit_bias=no_eos(target)))
    times, done = [], None
    while scheduler.has_work():
        events = scheduler.step()
        now = time.perf_counter()
        times += [now for e in events if isinstance(e, TokenStep)]
        done = next((e for e in events if isinstance(e, Finished)), done)
    out = {"tps": (len(times) - 2) / (times[-1] - times[1])}
    if done is not None and done.draft is not None:
        out |= {"acceptance_rate": done.draft.acceptance_rate, "tokens_per_pass": done.draft.tokens_per_pass}
    return out


def _peer(target: LoadedModel, draft: LoadedModel | None, prompt: list[int], tokens: int, k: int) -> dict:
    ban = make_logits_processors(logit_bias=no_eos(target))
    extra = {"draft_model": draft.model, "num_draft_tokens": k} if draft is not None else {}
    times, drafted = [], 0
    for response in stream_generate(
        target.model, target.tokenizer, prompt, max_tokens=tokens, logits_processors=ban, **extra
    ):
        times.append(time.perf_counter())
        drafted += bool(getattr(response, "from_draft", False))
    out = {"tps": (len(times) - 2) / (times[-1] - times[1])}
    if draft is not None:
        out["from_draft"] = drafted / len(times)
    return out


def speculative(
    target: LoadedModel | None = None,
    draft: LoadedModel | None = None,
    tokens: int = 48,
    repeats: int = 2,
    draft_tokens: int = 3,
) -> dict:
    """``target`` / ``draft``: another pair (a smoke run's small llama as both). Where the
    default model is a model of its shape (``LOGITSCOPE_BENCH_DEFAULT``, a GPU machine without
    its file, ``bench/gpu_run.sh``), it drafts for itself: every proposal is accepted, the
    upper bound of what a block gives, with both engines' own costs."""
    import os

    target = target or default_model()
    if draft is None:
        draft = target if os.environ.get("LOGITSCOPE_BENCH_DEFAULT") else requantized_draft()
    prompt = target.tokenizer.encode(PROMPT)
    runs: dict[str, list[dict]] = {name: [] for name in ("ours", "ours_draft", "mlx_lm", "mlx_lm_draft")}
    for _ in range(repeats):
        runs["ours"].append(_ours(target, None, prompt, tokens, draft_tokens))
        runs["ours_draft"].append(_ours(target, draft, prompt, tokens, draft_tokens))
        runs["mlx_lm"].append(_peer(target, None, prompt, tokens, draft_tokens))
        runs["mlx_lm_draft"].append(_peer(target, draft, prompt, tokens, draft_tokens))
    out = {name: {key: round(median([r[key] for r in rs]), 3) for key in rs[0]} for name, rs in runs.items()}
    out["ratio_to_mlx_lm_draft"] = round(out["ours_draft"]["tps"] / out["mlx_lm_draft"]["tps"], 3)
    out["draft_over_plain"] = round(out["ours_draft"]["tps"] / out["ours"]["tps"], 3)
    name = "itself" if draft is target else draft.name
    out["pair"] = {"target": target.name, "draft": name, "draft_tokens": draft_tokens, "tokens": tokens}
    out["goal"] = GOALS
    return out
