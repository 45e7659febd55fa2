"""Figure 17: what a quantized KV cache saves and costs. On the default model, for a few
context lengths: the bytes of the prompt's KV cache (mlx-lm's ``nbytes``) and the decode
rate (batch 1, ``top_logprobs=10``) with the cache unquantized, in 8 bits and in 4 bits
(groups of 64), each as a ratio to unquantized.

The prompt is prefilled once per length, unquantized, and each setting starts from a copy
of that cache, quantized whole where the setting quantizes: the same bytes and the same
decode work as a cache quantized from its first token (start 0), without prefilling the
prompt three times (the CPU prefills the default model at about 10 tokens/s). Repeats are
interleaved, so a change of machine load hits every setting alike."""

from __future__ import annotations

import mlx.core as mx

from bench.common import median, no_eos, run
from engine.api.events import Finished
from engine.api.kv_quantization import KVQuantization
from engine.api.params import SamplingParams
from engine.caches import batch as kv
from engine.caches.quantized import quantize_layer
from engine.models.load import LoadedModel, load
from engine.runtime.scheduler import Scheduler

SETTINGS = (None, 8, 4)
GROUP = 64
WORDS = "the lighthouse keeper found a message in a bottle and read it twice before dawn".split()


def _prompt(loaded: LoadedModel, n: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < n:
        ids += loaded.tokenizer.encode(" ".join(WORDS), add_special_tokens=False)
    return ids[:n]


def _prefilled(loaded: LoadedModel, prompt: list[int], chunk: int = 256) -> list:
    caches = kv.new_request_cache(loaded.model)
    for a in range(0, len(prompt), chunk):
        loaded.model(mx.array(prompt[a : a + chunk])[None], cache=caches)
        kv.eval_caches(caches)
    return caches


def _copy(caches: list, bits: int | None) -> list:
    held = caches[0].offset
    if bits is None:
        return [kv.cut(c, held, held) for c in caches]
    out = []
    for c in caches:
        q = quantize_layer(c, GROUP, bits)
        q.quantized_at = 0  # as if quantized from the first token (the same numbers' layout)
        out.append(q)
    return out


def _decode(loaded: LoadedModel, prompt: list[int], caches: list, tokens: int) -> float:
    """Decode rate from the prompt's cache (the store gives all but its last token back)."""
    scheduler = Scheduler(loaded, prefill_chunk=16)
    scheduler.prefix_store.add(prompt, caches)
    rid = scheduler.insert(prompt, SamplingParams(max_tokens=tokens, top_logprobs=10, logit_bias=no_eos(loaded)))
    done = next(e for e in run(scheduler) if isinstance(e, Finished) and e.request_id == rid)
    assert done.prefilled_tokens == 1, done.prefilled_tokens
    return done.generation_tps


def kv_quantization(
    base: LoadedModel | None = None, contexts: tuple[int, ...] = (512, 2048, 4096), tokens: int = 16, repeats: int = 2
) -> dict:
    """``base``: the model (None: the default one); its heads must be as wide as a group (64)."""
    base = base if base is not None else load("default")
    models = {bits: base.with_kv(KVQuantization(bits, GROUP) if bits else None) for bits in SETTINGS}
    by_context: dict = {}
    for n in contexts:
        prompt = _prompt(base, n)
        prefilled = _prefilled(base, prompt)
        nbytes = {bits: sum(c.nbytes for c in _copy(prefilled, bits)) for bits in SETTINGS}
        rates: dict = {bits: [] for bits in SETTINGS}
        for _ in range(repeats):
            for bits in SETTINGS:
                rates[bits].append(_decode(models[bits], prompt, _copy(prefilled, bits), tokens))
        row: dict = {}
        for bits in SETTINGS:
            name = "none" if bits is None else f"{bits}bit"
            tps = median(rates[bits])
            row[name] = {
                "nbytes": nbytes[bits],
                "bytes_vs_none": round(nbytes[bits] / nbytes[None], 4),
                "decode_tps": round(tps, 2),
                "decode_vs_none": round(tps / median(rates[None]), 3),
            }
        by_context[str(n)] = row
        del prefilled
    return {"group_size": GROUP, "decode_tokens": tokens, "repeats": repeats, "by_context": by_context}
