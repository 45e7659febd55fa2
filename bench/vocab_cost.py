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
HIDDEN = 576  # the default model's width


def vocab_cost(
    vocabs=VOCABS,
    steps: int = 8,
    hidden: int = HIDDEN,
    layers: int = LAYERS,
    repeats: int = 7,
    folder: Path | None = None,
    tokenizer: Path | None = None,
) -> dict:
    """``folder``: where the synthetic models are written (by default the temporary
    folder, where they are kept for the next run); ``tokenizer``: as ``synthetic_model``."""
    rows = {}
    for vocab in vocabs:
        where = (folder or Path(tempfile.gettempdir())) / f"logitscope-bench-vocab-{vocab}-{layers}-{hidden}"
        loaded = synthetic_model(where, hidden=hidden, layers=layers, vocab=vocab, tokenizer=tokenizer)
        ids = [t % vocab for t in loaded.tokenizer.encode(PROMPT)]  # V = 32k is smaller than the tokenizer
        parts = profile(loaded, batch=1, repeats=repeats, prompt_ids=ids)
        outside = parts["sample_and_pack"] + parts["transfer"] + parts["host"]
        step, forward = parts["forward"] + outside, parts["forward"]
        ban = make_logits_processors(logit_bias=no_eos(loaded))
        last = list(stream_generate(loaded.model, loaded.tokenizer, ids, max_tokens=steps * 2, logits_processors=ban))
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
    return {"hidden": hidden, "layers": layers, "by_vocab": rows}
