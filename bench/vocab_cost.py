"""Figure 13: the inspection cost against vocabulary size. Synthetic llamas with the default
model's body (hidden 576, 30 layers, float32) and V = 32k, 152k (Qwen) and 262k (Gemma 3),
batch 1, greedy (the default chain), ``top_logprobs=10``: the share of a decode step spent
outside the model's forward pass, and the step against mlx-lm's ``stream_generate`` on the
same model."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mlx_lm.generate import stream_generate
from mlx_lm.sample_utils import make_logits_processors

from bench.common import PROMPT, median, no_eos, synthetic_model
from bench.sampling_cost import _forward_only, _steady_step
from engine.params import SamplingParams
from engine.scheduler import Scheduler

VOCABS = (32_000, 151_936, 262_144)


def vocab_cost(vocabs=VOCABS, steps: int = 8) -> dict:
    rows = {}
    for vocab in vocabs:
        folder = Path(tempfile.gettempdir()) / f"logitscope-bench-vocab-{vocab}"
        loaded = synthetic_model(folder, hidden=576, layers=30, vocab=vocab)
        prompt = [t % vocab for t in loaded.tokenizer.encode(PROMPT)]  # V = 32k is smaller than the tokenizer
        params = SamplingParams(max_tokens=10_000, top_logprobs=10, logit_bias=no_eos(loaded))
        scheduler = Scheduler(loaded, max_batch_size=1)
        scheduler.insert(prompt, params)
        while not scheduler._active:
            scheduler.step()
        scheduler.step()
        forward = median([_forward_only(scheduler) for _ in range(steps)])
        step = _steady_step(scheduler, steps)
        for request_id in scheduler.request_ids():
            scheduler.cancel(request_id)
        ban = make_logits_processors(logit_bias=no_eos(loaded))
        last = list(
            stream_generate(loaded.model, loaded.tokenizer, prompt, max_tokens=steps * 2, logits_processors=ban)
        )
        peer_ms = 1000 / last[-1].generation_tps
        rows[str(vocab)] = {
            "step_ms": round(1000 * step, 1),
            "forward_ms": round(1000 * forward, 1),
            "outside_forward_share": round(max(0.0, 1 - forward / step), 3),
            "mlx_lm_step_ms": round(peer_ms, 1),
            "ratio_to_mlx_lm": round(peer_ms / (1000 * step), 3),
        }
    return {"hidden": 576, "layers": 30, "by_vocab": rows}
