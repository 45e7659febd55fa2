"""Figure 12: prefill speed of a 1,000-token prompt (and scoring speed of 200 tokens
through the default chain, which should cost about one prefill), ours (chunk sizes as the app uses
them: sized from the measured rate, engine/runtime/chunking.py) over mlx-lm's ``stream_generate``
(one 2,048-token step); and on the synthetic model, fixed chunk sizes against the
adaptive one, which is how the sizing was chosen."""

from __future__ import annotations

import time

from mlx_lm.generate import stream_generate

from bench.common import median
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel
from engine.runtime.scheduler import Scheduler
from engine.stages.vocabulary import Vocabulary


def _prompt(loaded: LoadedModel, tokens: int) -> list[int]:
    words = "the lighthouse keeper found a message in a bottle and read it twice before dawn".split()
    text = " ".join(words[i % len(words)] for i in range(tokens))
    return loaded.tokenizer.encode(text)[:tokens]


def _ours(loaded: LoadedModel, prompt: list[int], chunk: int | None) -> float:
    scheduler = Scheduler(loaded, prefill_chunk=chunk)
    scheduler.insert(prompt, SamplingParams(max_tokens=1))
    start = time.perf_counter()
    while scheduler.has_work():
        events = scheduler.step()
        if any(isinstance(e, (TokenStep, Finished)) for e in events):
            break
    return len(prompt) / (time.perf_counter() - start)


def _peer(loaded: LoadedModel, prompt: list[int]) -> float:
    last = list(stream_generate(loaded.model, loaded.tokenizer, prompt, max_tokens=1))[-1]
    return last.prompt_tps


def _score(loaded: LoadedModel, text: list[int]) -> float:
    """Teacher-forced scoring through the default chain (engine/analysis/score.py): tokens/s."""
    from engine.analysis.score import score
    from engine.api.events import ScoreDone
    from engine.runtime.text import TokenText

    pieces = TokenText(loaded.tokenizer)
    vocabulary = Vocabulary.of(loaded, pieces.piece)
    params = SamplingParams(top_logprobs=10)
    start = time.perf_counter()
    events = list(score(loaded, text[:1], text[1:], params, vocabulary, pieces, chunk=128))
    assert isinstance(events[-1], ScoreDone)
    return (len(text) - 1) / (time.perf_counter() - start)


def prefill(loaded: LoadedModel, synthetic: LoadedModel, tokens: int = 1000, repeats: int = 1) -> dict:
    prompt = _prompt(loaded, tokens)
    _ours(loaded, prompt[:64], None)  # warm-up
    ours = median([_ours(loaded, prompt, None) for _ in range(repeats)])
    peer = median([_peer(loaded, prompt) for _ in range(repeats)])
    score_tps = _score(loaded, prompt[:200])
    sweep = {}
    synthetic_prompt = _prompt(synthetic, tokens)
    for chunk in (16, 64, 256, 1024, None):
        sweep["adaptive" if chunk is None else str(chunk)] = round(_ours(synthetic, synthetic_prompt, chunk), 1)
    sweep["mlx_lm"] = round(_peer(synthetic, synthetic_prompt), 1)
    return {
        "prompt_tokens": len(prompt),
        "ours_tps": round(ours, 2),
        "mlx_lm_tps": round(peer, 2),
        "ratio": round(ours / peer, 3),
        "score_tps_200_tokens": round(score_tps, 2),
        "synthetic_tps_by_chunk": sweep,
    }
