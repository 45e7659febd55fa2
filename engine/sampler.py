"""The staged sampling pipeline over a whole batch.

Each stage is a small pure function of ``logits: [B, V] float32`` and per-row
parameters ``[B, 1]``. A neutral value switches a stage off for one row, so a
batch of mixed settings needs no branching; a stage no row uses is skipped
for the whole batch. Parameters are arrays, never Python constants, so a new
value never recompiles anything.

Order (DESIGN.md): raw -> bias -> penalties (``penalized``) -> temperature ->
top-k -> top-p -> min-p (``final``) -> draw. Unlike mlx-lm, temperature comes
before truncation, which changes what top-p and min-p keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from engine.params import SamplingParams

NEG_INF = float("-inf")
STAGE_NAMES = ("raw", "penalized", "final")


def apply_bias(logits: mx.array, bias: mx.array) -> mx.array:
    """logits, bias: [B, V] float32."""
    return logits + bias


def apply_penalties(
    logits: mx.array,
    counts: mx.array,
    repetition: mx.array,
    presence: mx.array,
    frequency: mx.array,
) -> mx.array:
    """Repetition (CTRL, Keskar et al. 2019), then OpenAI presence / frequency.

    logits: [B, V] float32; counts: [B, V] int32 (tokens in the window);
    repetition, presence, frequency: [B, 1] float32 (1, 0, 0 = off).
    """
    seen = counts > 0
    scaled = mx.where(logits > 0, logits / repetition, logits * repetition)
    logits = mx.where(seen, scaled, logits)
    return logits - presence * seen.astype(mx.float32) - frequency * counts.astype(mx.float32)


def apply_temperature(logits: mx.array, temperature: mx.array) -> mx.array:
    """temperature: [B, 1]; 0 (greedy) is treated as 1 so ``final`` stays informative."""
    return logits / mx.where(temperature > 0, temperature, 1.0)


def sort_descending(logits: mx.array) -> mx.array:
    return -mx.sort(-logits, axis=-1)


def apply_top_k(logits: mx.array, top_k: mx.array, sorted_logits: mx.array) -> mx.array:
    """Keep logits >= the k-th largest. top_k: [B, 1] int32, 0 = off. Ties at the k-th are kept."""
    vocab = logits.shape[-1]
    index = mx.clip(top_k - 1, 0, vocab - 1)
    kth = mx.take_along_axis(sorted_logits, index, axis=-1)
    kth = mx.where(top_k > 0, kth, NEG_INF)
    return mx.where(logits < kth, NEG_INF, logits)


def apply_top_p(logits: mx.array, top_p: mx.array, sorted_logits: mx.array) -> mx.array:
    """Keep the smallest set of most likely tokens whose probability reaches p.

    ``sorted_logits`` are the descending logits before this stage, already
    truncated the same way ``logits`` are. top_p: [B, 1], 1 = off.
    """
    probs = mx.softmax(sorted_logits, axis=-1)
    before = mx.cumsum(probs, axis=-1) - probs
    kept = mx.sum(before < top_p, axis=-1, keepdims=True)
    threshold = mx.take_along_axis(sorted_logits, mx.maximum(kept - 1, 0), axis=-1)
    # p == 1 must keep everything even where the cumulative sum rounds up to 1 early.
    threshold = mx.where(top_p >= 1.0, NEG_INF, threshold)
    return mx.where(logits < threshold, NEG_INF, logits)


def apply_min_p(logits: mx.array, min_p: mx.array) -> mx.array:
    """Drop tokens with p < min_p * p_max (Nguyen et al. 2024). min_p: [B, 1], 0 = off.

    In log space: keep l >= l_max + log(min_p); log(0) = -inf keeps all.
    """
    top = mx.max(logits, axis=-1, keepdims=True)
    threshold = top + mx.log(min_p)
    return mx.where(logits < threshold, NEG_INF, logits)


def draw(penalized: mx.array, final: mx.array, greedy: mx.array, noise: mx.array | None) -> mx.array:
    """Greedy rows take argmax of ``penalized``; the others a Gumbel-max draw from ``final``.

    greedy: [B] bool; noise: [B, V] Gumbel(0, 1) or None when every row is greedy.
    Returns [B] int32.
    """
    best = mx.argmax(penalized, axis=-1)
    if noise is None:
        return best.astype(mx.int32)
    sampled = mx.argmax(final + noise, axis=-1)
    return mx.where(greedy, best, sampled).astype(mx.int32)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def step_key(seed: int, index: int) -> mx.array:
    """The RNG key of a request's ``index``-th token: a function of seed and index only,
    so draws never depend on the batch, and a branch replays the same keys."""
    return mx.random.key(_splitmix64(seed ^ _splitmix64(index)))


def gumbel_noise(keys: Sequence[mx.array], vocab: int) -> mx.array:
    """[B, V] float32 Gumbel noise, each row from its own key."""
    return mx.stack([mx.random.gumbel(shape=(vocab,), key=k) for k in keys])


@dataclass
class RowParams:
    """Per-row parameters as [B, 1] arrays, and which stages any row needs."""

    temperature: mx.array
    top_k: mx.array
    top_p: mx.array
    min_p: mx.array
    repetition: mx.array
    presence: mx.array
    frequency: mx.array
    greedy: mx.array
    any_penalty: bool
    any_sort: bool
    any_min_p: bool
    all_greedy: bool

    @classmethod
    def build(cls, params: Sequence[SamplingParams]) -> RowParams:
        def column(values: list[float], dtype: type = np.float32) -> mx.array:
            return mx.array(np.asarray(values, dtype=dtype).reshape(-1, 1))

        return cls(
            temperature=column([p.temperature for p in params]),
            top_k=column([p.top_k for p in params], np.int32),
            top_p=column([p.top_p for p in params]),
            min_p=column([p.min_p for p in params]),
            repetition=column([p.repetition_penalty for p in params]),
            presence=column([p.presence_penalty for p in params]),
            frequency=column([p.frequency_penalty for p in params]),
            greedy=mx.array([p.greedy for p in params]),
            any_penalty=any(p.has_penalties for p in params),
            any_sort=any(p.top_k > 0 or p.top_p < 1.0 for p in params),
            any_min_p=any(p.min_p > 0.0 for p in params),
            all_greedy=all(p.greedy for p in params),
        )


@dataclass
class PipelineResult:
    """Every named distribution of one step, [B, V] float32, and the drawn tokens [B]."""

    raw: mx.array
    biased: mx.array
    penalized: mx.array
    final: mx.array
    tokens: mx.array


TRACES = {"count": 0}
"""How many times a pipeline variant was traced; tests read it to prove that new
parameter values never recompile."""

_VARIANTS: dict[tuple[bool, ...], object] = {}


def _pipeline_variant(use_bias: bool, use_penalty: bool, use_sort: bool, use_min_p: bool, use_noise: bool):
    """The compiled pipeline for one combination of active stages (at most 32 variants)."""
    key = (use_bias, use_penalty, use_sort, use_min_p, use_noise)
    if key in _VARIANTS:
        return _VARIANTS[key]

    def core(raw, bias, counts, noise, temperature, top_k, top_p, min_p, rep, pres, freq, greedy):
        TRACES["count"] += 1
        raw = raw.astype(mx.float32)
        biased = apply_bias(raw, bias) if use_bias else raw
        penalized = apply_penalties(biased, counts, rep, pres, freq) if use_penalty else biased
        final = apply_temperature(penalized, temperature)
        if use_sort:
            ordered = sort_descending(final)
            final = apply_top_k(final, top_k, ordered)
            vocab = ordered.shape[-1]
            limit = mx.where(top_k > 0, top_k, vocab)
            ordered = mx.where(mx.arange(vocab)[None, :] < limit, ordered, NEG_INF)
            final = apply_top_p(final, top_p, ordered)
        if use_min_p:
            final = apply_min_p(final, min_p)
        tokens = draw(penalized, final, greedy, noise if use_noise else None)
        return raw, biased, penalized, final, tokens

    compiled = mx.compile(core)
    _VARIANTS[key] = compiled
    return compiled


def run_pipeline(
    logits: mx.array,
    rows: RowParams,
    bias: mx.array | None,
    counts: mx.array | None,
    noise: mx.array | None,
) -> PipelineResult:
    """One sampling step for the batch. logits: [B, V] of any float dtype.

    Stages no row needs are left out of the graph; every parameter is an array
    input of the compiled function, so changing a value never retraces it.
    """
    use_penalty = rows.any_penalty and counts is not None
    use_noise = not rows.all_greedy and noise is not None
    fn = _pipeline_variant(bias is not None, use_penalty, rows.any_sort, rows.any_min_p, use_noise)
    unused = mx.array(0.0)
    raw, biased, penalized, final, tokens = fn(
        logits,
        bias if bias is not None else unused,
        counts if use_penalty else unused,
        noise if use_noise else unused,
        rows.temperature,
        rows.top_k,
        rows.top_p,
        rows.min_p,
        rows.repetition,
        rows.presence,
        rows.frequency,
        rows.greedy,
    )
    return PipelineResult(raw=raw, biased=biased, penalized=penalized, final=final, tokens=tokens)
