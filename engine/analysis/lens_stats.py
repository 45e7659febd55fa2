"""The logit lens's per-layer summaries on the host, in NumPy (mlx-cpu's exp measured about
6x slower): log-softmax, entropy and KL to the final layer with one exp per value, the top N
without sorting the vocabulary, and ranks by counting (a tie going to the lower id)."""

from __future__ import annotations

import numpy as np

_BLOCK = 64
"""The top N is searched among the N blocks of this many tokens with the largest maxima."""


def log_softmax_entropy_kl(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log-softmax (in ``logits``' place), entropy and KL(final ‖ layer) of ``[L + 1, G, V]``
    logits (the last layer is the final one); one exp per value, sums pairwise in float32."""
    top = logits.max(-1, keepdims=True)
    e = np.subtract(logits, top)
    np.exp(e, out=e)
    total = e.sum(-1, keepdims=True)
    lp = logits
    lp -= top + np.log(total)
    p_final = e[-1] / total[-1]
    np.multiply(e, lp, out=e)
    entropy = -(e.sum(-1) / total[..., 0])
    np.subtract(lp[-1][None], lp, out=e)
    e *= p_final[None]
    kl = e.sum(-1)
    return lp, entropy, kl


def top_n(lp: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` best (token id, logprob) of each row of ``lp`` ``[..., V]``, best first, a tie
    going to the lower id (as a stable sort of ``-lp`` orders them). Only the ``n`` blocks of
    ``_BLOCK`` tokens with the largest maxima can hold them; a row where an exact tie at the
    n-th value reaches outside those blocks is sorted whole."""
    shape, vocab = lp.shape[:-1], lp.shape[-1]
    flat = lp.reshape(-1, vocab)
    n = min(n, vocab)
    whole = vocab // _BLOCK * _BLOCK
    maxima = [flat[:, :whole].reshape(len(flat), -1, _BLOCK).max(-1)] if whole else []
    if whole < vocab:
        maxima.append(flat[:, whole:].max(-1, keepdims=True))
    blocks = np.concatenate(maxima, axis=1)
    k = min(n, blocks.shape[1])
    best = np.argpartition(-blocks, k - 1, axis=-1)[:, :k]
    candidates = (best[..., None] * _BLOCK + np.arange(_BLOCK)).reshape(len(flat), -1)
    inside = candidates < vocab
    candidates = np.where(inside, candidates, vocab)
    values = np.take_along_axis(flat, np.minimum(candidates, vocab - 1), axis=-1)
    values[~inside] = -np.inf
    order = np.lexsort((candidates, -values), axis=-1)[:, :n]
    ids = np.take_along_axis(candidates, order, axis=-1)
    tops = np.take_along_axis(values, order, axis=-1)
    at_least = tops[:, -1:]
    for row in np.nonzero((flat >= at_least).sum(-1) != ((values >= at_least) & inside).sum(-1))[0]:
        ids[row] = np.argsort(-flat[row], kind="stable")[:n]
        tops[row] = flat[row, ids[row]]
    return ids.reshape(*shape, n), tops.reshape(*shape, n)


def rank(lp: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where ``tokens[g]`` ranks in each row ``lp[l, g]`` (1 = first; a tie goes to the lower
    id, as in :func:`top_n`) and its logprob there."""
    at = np.broadcast_to(tokens[None, :, None], (*lp.shape[:2], 1))
    value = np.take_along_axis(lp, at, axis=-1)
    rank = (lp > value).sum(-1) + 1
    for layer, k in zip(*np.nonzero((lp == value).sum(-1) > 1), strict=True):
        rank[layer, k] += int((lp[layer, k, : tokens[k]] == value[layer, k, 0]).sum())
    return rank, value[..., 0]
