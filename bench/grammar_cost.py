"""Figure 24: what structured output costs a decode step. The same sampled chain with and
without a JSON-schema grammar (inside a string value, where nearly every token is allowed and
llguidance's mask is the largest), batch 1 and 8, at V = 49,152 (the default model's
vocabulary, on the default model) and V = 262,144 (Gemma 3's, a synthetic llama with the
default model's width), their schedulers stepped in turn. Goal: the grammar's step at most
1.10 of the step without it. Also llguidance's host time per mask, which the scheduler spends
while the device runs the forward pass it queued before reading the last step back."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.chain_cost import SAMPLED, _interleaved_steps
from bench.common import median, synthetic_model
from bench.vocab_cost import HIDDEN, LAYERS
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.text import TokenText
from engine.stages.vocabulary import Vocabulary

SCHEMA = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"]}
GRAMMAR = ("json_schema", json.dumps(SCHEMA))
OPENING = '{"story": "Once upon a time'
GOALS = {"grammar_over_plain": 1.10}


def mask_ms(loaded: LoadedModel, repeats: int = 50) -> float:
    """llguidance's host time for one mask inside the story's string (median, ms)."""
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    vocabulary = Vocabulary.of(loaded, TokenText(loaded.tokenizer).piece)
    matcher = vocabulary.matcher(SamplingParams(grammar=GRAMMAR).grammar)
    for token in loaded.tokenizer.encode(OPENING, add_special_tokens=False):
        matcher.consume_token(token)
    mask = allocate_token_bitmask(1, loaded.vocab_size)
    times = []
    words = loaded.tokenizer.encode(" there was a castle by the sea and", add_special_tokens=False)
    for i in range(repeats):
        start = time.perf_counter()
        fill_next_token_bitmask(matcher, mask, 0)
        times.append(time.perf_counter() - start)
        matcher.consume_token(words[i % len(words)])
    allowed = int(np.unpackbits(mask.view(np.uint8))[: loaded.vocab_size].sum())
    return round(1000 * median(times), 3), allowed


def grammar_cost(
    loaded: LoadedModel,
    sizes=(1, 8),
    large_vocab: int | None = 262_144,
    steps: int = 5,
    rounds: int = 3,
    folder: Path | None = None,
    tokenizer: Path | None = None,
) -> dict:
    """``loaded``: the default model (V = 49,152); ``large_vocab``: the synthetic llama's
    vocabulary (None: none), written to ``folder`` (the temporary folder by default) with
    ``tokenizer`` as ``synthetic_model``."""
    models = {str(loaded.vocab_size): loaded}
    if large_vocab is not None:
        where = (folder or Path(tempfile.gettempdir())) / f"logitscope-bench-vocab-{large_vocab}-{LAYERS}-{HIDDEN}"
        models[str(large_vocab)] = synthetic_model(
            where, hidden=HIDDEN, layers=LAYERS, vocab=large_vocab, tokenizer=tokenizer
        )
    chains = {"plain": SAMPLED, "grammar": {**SAMPLED, "grammar": GRAMMAR}}
    rows = {}
    for vocab, model in models.items():
        host_ms, allowed = mask_ms(model)
        for size in sizes:
            step = _interleaved_steps(model, size, chains, steps, rounds)
            rows[f"{vocab}/{size}"] = {
                "plain_step_ms": round(1000 * step["plain"], 1),
                "grammar_step_ms": round(1000 * step["grammar"], 1),
                "grammar_over_plain": round(step["grammar"] / step["plain"], 3),
                "mask_host_ms_per_row": host_ms,
                "allowed_in_a_string": allowed,
            }
    return {"grammar": GRAMMAR[0], "sampled": SAMPLED, "by_vocab_and_batch": rows, "goal": GOALS}
