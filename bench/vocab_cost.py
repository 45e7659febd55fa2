"""Figure 13: the inspection cost against vocabulary size. Synthetic llamas with the default
model's width (hidden 576, 8 float16 layers) and V = 32k, 152k (Qwen) and 262k (Gemma 3),
batch 1, greedy (the default chain), ``top_logprobs=10``: the share of a decode step spent
outside the model's forward pass, and the step against mlx-lm's ``stream_generate`` on the
same model."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mlx_lm.generate import stream_generate
from mlx_lm.sample_utils import make_logits_processors

from bench.common import PROMPT, no_eos, synthetic_model
from bench.profile_step import profile

VOCABS = (32_000, 151_936, 262_144)
# Eight float16 layers: about the step time of the default model (30 Q4 layers) here.
LAYERS = 8


def vocab_cost(vocabs=VOCABS, steps: int = 8) -> dict:
    rows = {}
    for vocab in vocabs:
        folder = Path(tempfile.gettempdir()) / f"logitscope-bench-vocab-{vocab}-{LAYERS}"
        loaded = synthetic_model(folder, hidden=576, layers=LAYERS, vocab=vocab)
        parts = profile(loaded, batch=1, prompt_ids=[t % vocab for t in loaded.tokenizer.encode(PROMPT)])
        outside = parts["sample_and_pack"] + parts["transfer"] + parts["host"]
        step, forward = parts["forward"] + outside, parts["forward"]
        prompt = [t % vocab for t in loaded.tokenizer.encode(PROMPT)]  # V = 32k is smaller than the tokenizer
        ban = make_logits_processors(logit_bias=no_eos(loaded))
        last = list(
            stream_generate(loaded.model, loaded.tokenizer, prompt, max_tokens=steps * 2, logits_processors=ban)
        )
        peer_ms = 1000 / last[-1].generation_tps
        rows[str(vocab)] = {
            "step_ms": round(step, 1),
            "forward_ms": round(forward, 1),
            "outside_forward_ms": round(outside, 2),
            "outside_forward_share": round(outside / step, 3),
            "full_step_ms": parts["full_step"],
            "mlx_lm_step_ms": round(peer_ms, 1),
            "ratio_to_mlx_lm": round(peer_ms / parts["full_step"], 3),
        }
    return {"hidden": 576, "layers": LAYERS, "by_vocab": rows}
