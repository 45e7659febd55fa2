"""Plain NumPy references for the stages that transformers does not have, written from
llama.cpp's ``src/llama-sampling.cpp`` (not from engine code): top-n-σ, XTC, dynamic
temperature (``temp_ext``), the penalties (presence / frequency) and DRY, recomputed
from scratch on every call.

Every function takes one row (``[V]`` logits, removed tokens ``-inf``) and scalar
parameters. llama.cpp shrinks its candidate array where we write ``-inf``, so "the
candidates" below are the finite logits. The engine's documented deliberate
differences are followed here, each marked ``# deliberate:``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

NEG_INF = -np.inf
FLOAT_MAX_LOG = 88.7228391  # llama.cpp: the approximate log of FLT_MAX
MAX_TAIL_TOKENS = 20  # llama.cpp's MAX_SEQ_LEN for a breaker's tokenized tail
MIN_DYNAMIC_TEMPERATURE = 1e-6


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64; -inf stays -inf."""
    x = np.asarray(logits, np.float64)
    top = np.max(x[np.isfinite(x)])
    return x - (top + np.log(np.sum(np.exp(x - top))))


def softmax(logits: np.ndarray) -> np.ndarray:
    return np.exp(log_softmax(logits))


# --- top-n-σ: llama_sampler_top_n_sigma_apply ------------------------------------------


def top_n_sigma(logits: np.ndarray, n: float) -> np.ndarray:
    """Mean and population σ over the non -inf logits; remove ``logit < max - n·σ``."""
    if n <= 0.0 or logits.size <= 1:
        return logits.copy()
    valid = [float(x) for x in logits if x != NEG_INF]
    top = max(valid)
    mean = sum(valid) / len(valid)
    std = (sum((x - mean) ** 2 for x in valid) / len(valid)) ** 0.5
    return np.where(logits < top - n * std, NEG_INF, logits)


# --- XTC: llama_sample_xtc_apply ------------------------------------------------------


def xtc(logits: np.ndarray, probability: float, threshold: float, coin: float) -> np.ndarray:
    """With ``coin <= probability`` (llama.cpp returns when ``chance > probability``):
    sort the candidates by probability, find ``pos_last``, the last index of the leading
    run with ``p >= threshold``, and drop the ``pos_last`` tokens before it."""
    candidates = np.flatnonzero(np.isfinite(logits))
    if probability <= 0.0 or threshold > 0.5 or candidates.size < 2:
        return logits.copy()
    if coin > probability:
        return logits.copy()
    probs = softmax(logits)
    order = candidates[np.argsort(-probs[candidates], kind="stable")]
    pos_last = 0
    for i, token in enumerate(order):
        if probs[token] >= threshold:
            pos_last = i
        else:
            break
    out = logits.copy()
    if pos_last > 0:
        out[order[:pos_last]] = NEG_INF
        # deliberate: tokens tied with the one kept (the least likely above the threshold) stay too.
        tied = order[:pos_last][logits[order[:pos_last]] == logits[order[pos_last]]]
        out[tied] = logits[tied]
    return out


# --- dynamic temperature: llama_sampler_temp_ext_apply ----------------------------------


def temp_ext(logits: np.ndarray, temperature: float, delta: float, exponent: float) -> np.ndarray:
    """``delta > 0``: ``T' = lo + (hi - lo) · (H / log n) ** exponent`` with ``lo = max(0,
    T - delta)``, ``hi = T + delta``, H the entropy and n the number of candidates;
    unchanged when n <= 1. Otherwise plain ``logits / T``."""
    if temperature <= 0.0:
        # deliberate: greedy rows draw the argmax entering this stage; the stage divides by 1.
        return logits / 1.0
    if delta <= 0.0:
        return logits / temperature
    finite = np.isfinite(logits)
    size = int(finite.sum())
    if size <= 1:
        return logits.copy()
    lo, hi = max(0.0, temperature - delta), temperature + delta
    max_entropy = -np.log(1.0 / size)
    p = softmax(logits)[finite]
    entropy = -sum(float(q) * np.log(q) for q in p if q > 0.0)
    dyn = lo + (hi - lo) * (entropy / max_entropy) ** exponent
    # deliberate: llama.cpp keeps only the argmax at T' <= 0; the engine floors T' instead.
    dyn = max(dyn, MIN_DYNAMIC_TEMPERATURE)
    return logits / dyn


# --- penalties: llama_sampler_penalties_apply ------------------------------------------


def penalties(logits: np.ndarray, counts: np.ndarray, repetition: float, presence: float, frequency: float):
    out = np.asarray(logits, np.float64).copy()
    for token in np.flatnonzero(counts > 0):
        count = int(counts[token])
        out[token] = out[token] * repetition if out[token] <= 0 else out[token] / repetition
        out[token] -= count * frequency + presence
    return out


# --- DRY: get_overlapping_token_sequences and llama_sampler_dry_apply -------------------

Processed = dict[int, list[tuple[int, ...]]]
"""head token -> tails (llama.cpp's ``dry_processed_breakers`` multimap); ``()`` is a
single-token breaker (a token whose text contains a breaker)."""


def overlapping_token_sequences(
    pieces: Sequence[str], text: str, encode: Callable[[str], list[int]], out: Processed
) -> None:
    for token, word in enumerate(pieces):
        if text in word:
            out.setdefault(token, []).append(())
            continue
        pos = word.find(text[0])
        while pos != -1:
            match, i = True, 1
            while i < len(text) and i + pos < len(word):
                if word[pos + i] != text[i]:
                    match = False
                    break
                i += 1
            if match:
                tail = tuple(encode(text[i:]))[:MAX_TAIL_TOKENS]
                if tail not in out.get(token, []):
                    out.setdefault(token, []).append(tail)
            pos = word.find(text[0], pos + 1)


def process_breakers(breakers: Sequence[str], pieces: Sequence[str], encode: Callable[[str], list[int]]) -> Processed:
    out: Processed = {}
    for text in breakers:
        overlapping_token_sequences(pieces, text[:40], encode, out)
    return out


def dry_penalties(
    history: Sequence[int],
    processed: Mapping[int, Sequence[tuple[int, ...]]],
    vocab: int,
    multiplier: float,
    base: float,
    allowed_length: int,
    penalty_last_n: int,
) -> np.ndarray:
    """[V] float32: what DRY subtracts from each logit after ``history`` (prompt + output)."""
    out = np.zeros(vocab, np.float32)
    if multiplier == 0.0 or base < 1.0 or penalty_last_n == 0:
        return out
    last_tokens = list(history)
    effective = len(last_tokens) if penalty_last_n == -1 else max(penalty_last_n, 0)
    last_n_repeat = min(len(last_tokens), effective)
    if last_n_repeat <= allowed_length:
        return out

    def rat(i: int) -> int:  # the i-th token from the end
        return last_tokens[len(last_tokens) - 1 - i]

    # Step 1: the most recent restart sequence limits the repeat length.
    rep_limit = last_n_repeat
    for i in range(last_n_repeat):
        tails = processed.get(rat(i))
        if tails is None:
            continue
        longest_match = -1
        for tail in tails:
            seq_len = len(tail)
            if longest_match < seq_len <= i and all(tail[o] == rat(i - o - 1) for o in range(seq_len)):
                longest_match = seq_len
        if longest_match >= 0:
            rep_limit = i - longest_match
            break
    if rep_limit < allowed_length:
        return out

    repeat = repeat_counts(last_tokens[-last_n_repeat:], rep_limit)

    # Step 3: the longest repeat each token would extend.
    max_repeat: dict[int, int] = {}
    for i in range(last_n_repeat - 1):
        if repeat[i] >= allowed_length:
            token = rat(last_n_repeat - 2 - i)
            max_repeat[token] = max(max_repeat.get(token, 0), repeat[i])

    # Step 4: penalties, the exponent capped so base ** exponent stays below FLT_MAX.
    base32, multiplier32 = float(np.float32(base)), float(np.float32(multiplier))
    max_exponent = int(np.float32(FLOAT_MAX_LOG) / np.log(np.float32(base))) if base32 > 1.000001 else 0
    for token, length in max_repeat.items():
        if () in processed.get(token, []):
            continue  # a single-token breaker is never penalized
        exponent = length - allowed_length
        if max_exponent > 0 and exponent > max_exponent:
            exponent = max_exponent
        with np.errstate(over="ignore"):
            out[token] = np.float32(multiplier32 * base32**exponent)
    return out


def repeat_counts(window: Sequence[int], rep_limit: int) -> list[int]:
    """Step 2 of llama_sampler_dry_apply: the Z-algorithm over the reversed window.
    ``repeat[last - k]`` is the length of the common suffix of the window ending k tokens
    before its end and the window itself, capped at ``rep_limit``."""
    size = len(window)

    def rat(i: int) -> int:
        return window[size - 1 - i]

    repeat = [0] * size
    last = size - 1
    lt = rt = 0
    for k in range(1, size):
        if k > rt:
            n = 0
            while n + k < size and rat(n) == rat(n + k):
                n += 1
            repeat[last - k] = min(n, rep_limit)
            if n > 0:
                lt, rt = k, k + n - 1
        else:
            p = k - lt
            right_part_len = rt - k + 1
            if repeat[last - p] < right_part_len:
                repeat[last - k] = min(repeat[last - p], rep_limit)
            else:
                i = rt + 1
                while i < size and rat(i) == rat(i - k):
                    i += 1
                repeat[last - k] = min(i - k, rep_limit)
                lt, rt = k, i - 1
    return repeat


def z_naive(window: Sequence[int]) -> list[int]:
    """The quantity step 2 computes, by brute force: for each end position i of the
    window, the length of the longest common suffix of window[..i] and the window."""
    n = len(window)
    out = []
    for i in range(n):
        length = 0
        while length <= i and window[i - length] == window[n - 1 - length]:
            length += 1
        out.append(length if i < n - 1 else 0)
    return out
