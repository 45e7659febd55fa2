"""How far the running precision is from float32, token by token, on a given text.

The text runs teacher-forced twice over the same weights: in the precision the model
runs in, and in float32. Casting float16/bfloat16 parameters to float32 and back is
exact, so the float32 pass uses a float32 copy of the parameters that is swapped in
for each chunk (memory: the float parameters once more, in float32), and each pass
keeps its own KV cache. Per scored token: KL(float32 ‖ running) over the whole
vocabulary, the largest |Δ logprob| over float32's top 5, and whether the top token
agrees. Only the raw distribution is compared: every sampling stage is a function of
it. With a quantized KV cache (``LoadedModel.kv``) the running pass quantizes its cache as
generation does and the float32 pass does not: the check measures both together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from engine.analysis.kl import kl_divergences
from engine.api.errors import EngineError
from engine.api.results import TokenFidelity
from engine.caches import batch as kv
from engine.models.load import LoadedModel
from engine.runtime.requests import check_prompt

TOP = 5


def compare(running: np.ndarray, reference: np.ndarray, targets: Sequence[int], start: int) -> list[TokenFidelity]:
    """Rows of two ``[T, V]`` float32 logprob arrays, position ``t`` predicting ``targets[t]``."""
    kld = kl_divergences(reference, running)
    top = np.argsort(-reference, axis=-1)[:, :TOP]
    diff = np.abs(np.take_along_axis(running, top, -1) - np.take_along_axis(reference, top, -1)).max(-1)
    agree = np.argmax(running, -1) == top[:, 0]
    rows = []
    for t, token in enumerate(targets):
        rows.append(
            TokenFidelity(
                index=start + t,
                token_id=int(token),
                kld=float(kld[t]),
                top5_max_diff=float(diff[t]),
                top_agrees=bool(agree[t]),
                logprob=float(running[t, token]),
                logprob_float32=float(reference[t, token]),
            )
        )
    return rows


def check(
    loaded: LoadedModel,
    tokens: Sequence[int],
    chunk: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[TokenFidelity]:
    """Yield one TokenFidelity per token of ``tokens`` after the first, chunk by chunk.
    Stop iterating to cancel; the model's own parameters are left as they were."""
    full = check_prompt(list(tokens), loaded.vocab_size, loaded.context_length + 1)
    if len(full) < 2:
        raise EngineError("the fidelity check needs a text of at least two tokens.")
    model = loaded.model
    own = model.parameters()
    as32 = _float32_copy(own)
    caches = (kv.new_request_cache(model, loaded.kv), kv.new_request_cache(model))
    try:
        for a in range(0, len(full) - 1, chunk):
            b = min(a + chunk, len(full) - 1)
            window = mx.array(full[a:b])[None]
            running = raw_logprobs(model, window, caches[0])
            kv.after_forward(caches[0], loaded.kv)
            model.update(as32)
            reference = raw_logprobs(model, window, caches[1])
            model.update(own)
            yield from compare(running, reference, full[a + 1 : b + 1], a)
            if progress is not None:
                progress(b, len(full) - 1)
    finally:
        model.update(own)


def raw_logprobs(model, window: mx.array, cache) -> np.ndarray:
    """One forward pass of ``window`` ``[1, T]`` through ``cache``: the raw log-softmax
    ``[T, V]`` float32 on the host (the fidelity check's and the model comparison's rows)."""
    logits = model(window, cache=cache)[0].astype(mx.float32)
    out = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    mx.eval(out)
    return np.array(out)


def _float32_copy(params):
    """The parameters with every floating-point array in float32 (others shared)."""
    flat = tree_flatten(params)
    cast = [
        (k, v.astype(mx.float32) if isinstance(v, mx.array) and mx.issubdtype(v.dtype, mx.floating) else v)
        for k, v in flat
    ]
    mx.eval([v for _, v in cast])
    return tree_unflatten(cast)
