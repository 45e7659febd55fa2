"""Hand-built TokenSteps with a multi-stage chain, for the app's tests (no model needed).

``chain_step`` computes every stage honestly on a small vocabulary with NumPy, so the
numbers the views show can be checked against the step's own candidate logprobs.
"""

from __future__ import annotations

import math

import numpy as np

from engine.api.events import Candidate, TokenStep
from engine.api.params import SamplingParams

VOCAB = [" Paris", " Lyon", " the", " a", " France", ".", "\n", " is", " city", "é", " of", "<|im_end|>"]
LOGITS = [4.0, 3.2, 2.9, 2.0, 1.5, 1.1, 0.5, 0.2, -0.3, -1.0, -1.6, -2.5]


def _logsoftmax(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    out = np.full_like(x, -np.inf)
    m = x[finite].max()
    out[finite] = x[finite] - m - np.log(np.exp(x[finite] - m).sum())
    return out


def _entropy(lp: np.ndarray) -> float:
    finite = np.isfinite(lp)
    return float(-(np.exp(lp[finite]) * lp[finite]).sum())


def chain_step(
    index: int = 0,
    chosen: int = 0,
    params: SamplingParams | None = None,
    logits: list[float] | None = None,
) -> TokenStep:
    """raw -> bias (+1 on " Lyon") -> penalties (-0.8 on " the") -> dry (-1.5 on " a")
    -> temperature (/0.8) -> top_k (k = 8: removes the last four) -> xtc (threshold 0.1:
    removes " Lyon", the most likely, and keeps " Paris", the least likely above it)."""
    params = params or SamplingParams(
        temperature=0.8,
        top_k=8,
        repetition_penalty=1.2,
        dry_multiplier=0.8,
        xtc_probability=1.0,
        xtc_threshold=0.1,
        logit_bias={1: 1.0},
        seed=3,
    )
    x = np.array(logits or LOGITS, dtype=np.float64)
    raw = x.copy()
    bias = np.zeros_like(x)
    bias[1] = 1.0
    penalty = np.zeros_like(x)
    penalty[2] = -0.8
    snapshots = {"raw": x}
    x = x + bias
    snapshots["bias"] = x
    x = x + penalty
    snapshots["penalties"] = x
    x = x - np.array([0, 0, 0, 1.5] + [0] * (len(x) - 4))
    snapshots["dry"] = x
    x = x / 0.8
    snapshots["temperature"] = x
    kth = np.sort(x)[::-1][7]
    x = np.where(x >= kth, x, -np.inf)
    snapshots["top_k"] = x
    p = np.exp(_logsoftmax(x))
    above = np.flatnonzero(p >= 0.1)
    if len(above) >= 2:
        keep = above[np.argmin(p[above])]
        x = np.where((p >= 0.1) & (np.arange(len(x)) != keep), -np.inf, x)
    snapshots["xtc"] = x
    chain = tuple(snapshots)
    lps = {s: _logsoftmax(v) for s, v in snapshots.items()}
    top: list[Candidate] = []
    for i in range(len(x)):
        logprobs = tuple(float(lps[s][i]) for s in chain)
        removed = next((s for s, v in zip(chain, logprobs, strict=True) if v == -math.inf), None)
        top.append(
            Candidate(
                token_id=i,
                text=VOCAB[i],
                raw_logit=float(raw[i]),
                logprobs=logprobs,
                removed_by=removed,
                bias=float(bias[i]),
                penalty=float(penalty[i]),
                count=1 if i == 2 else 0,
            )
        )
    # Candidates arrive in no particular order; the views sort them by raw rank.
    top.reverse()
    return TokenStep(
        request_id=1,
        index=index,
        position=10 + index,
        token_id=chosen,
        text=VOCAB[chosen],
        piece=VOCAB[chosen],
        chain=chain,
        logprobs=tuple(float(lps[s][chosen]) for s in chain),
        entropies=tuple(_entropy(lps[s]) for s in chain),
        survivors=tuple(int(np.isfinite(snapshots[s]).sum()) for s in chain),
        top=tuple(top),
        params=params,
    )


def simple_step(index: int, chain: tuple[str, ...], entropies: tuple[float, ...], params: SamplingParams) -> TokenStep:
    """A step with one candidate (the chosen one) and the given per-stage entropies."""
    logprobs = tuple(-0.1 for _ in chain)
    return TokenStep(
        request_id=1,
        index=index,
        position=index,
        token_id=0,
        text="a",
        piece="a",
        chain=chain,
        logprobs=logprobs,
        entropies=entropies,
        survivors=tuple(10 for _ in chain),
        top=(Candidate(0, "a", 1.0, logprobs, None, 0.0, 0.0, 0),),
        params=params,
    )
