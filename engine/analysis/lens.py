"""The logit lens: each layer's residual stream read out as a next-token distribution.

For layer ``l`` (0 = the embedding output as the model scales it, the input of the first
block; ``l`` = 1 … L the stream after block ``l``) the distribution is
``softmax(head(final_norm(h_l)))``, ``head`` being the model's own unembedding with its
final-logit softcapping: the architecture's own code runs it (its ``model`` attribute is
swapped, for one call, for a stand-in returning ``final_norm(h_l)``), so tied and untied
embeddings and softcapping need no table here. The blocks are walked by wrapping each of
``model.model.layers`` for one forward pass (MoE blocks included). Layer L must reproduce
the model's raw logits (checked on every call, at the last position asked for); an
architecture whose blocks cannot be walked so is refused with its name.

Cost: one forward pass over the tokens up to the last position asked for (from the first
position asked for when :func:`lens_continued` is given a cache holding the tokens before
it), in which the model's head runs at that last position only; then, ``GROUP`` positions
at a time (fewer for a large vocabulary), one unembedding of all L + 1 layers' rows
together and the summaries on the host.

On the CPU backend the unembedding's matrix product runs on the host with NumPy's BLAS
(the model's code still runs around it, through a stand-in for its ``lm_head`` / tied
embedding): mlx-cpu's quantized and dense products are plain loops there, about 30× slower
for these row counts. The float32 matrix is kept for the model's life when it is at most
``HOST_HEAD_BYTES``, else dequantized again for each read-out. The summaries (log-softmax,
entropy, KL, ranks, top N) are computed with NumPy on every backend: on this CPU its
vectorized exp is about 6× faster than mlx-cpu's.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from engine.analysis.lens_stats import log_softmax_entropy_kl, rank, top_n
from engine.api.errors import EngineError
from engine.api.results import LensLayer, LensPosition
from engine.models.load import LoadedModel

NORM_NAMES = ("norm", "final_layernorm", "final_norm", "ln_f", "embedding_norm")
GROUP = 16
"""Positions read out together: (L + 1) × GROUP × V float32 values at a time, fewer where
that would pass ``READ_OUT_VALUES``."""
READ_OUT_VALUES = 1 << 25
"""At most this many logits (128 MiB of float32) in one read-out, unless one position needs more."""
HOST_HEAD_BYTES = 1 << 30
"""The largest float32 copy of the head kept on the host between read-outs (CPU backend)."""
HOST_HEAD: bool | None = None
"""Compute the head's product on the host: None = on the CPU backend (tests force it)."""
_CHUNK = 8192
"""Rows of the head dequantized at a time."""


# Walking the blocks ------------------------------------------------------------------


class _Recorder:
    """Stands in for one block for one call: runs it and keeps its output (and, for the
    first, its input: the embedding output) at ``rows`` (None: every position)."""

    def __init__(self, block: Any, index: int, sink: dict[int, mx.array], rows: mx.array | None) -> None:
        self._block, self._index, self._sink, self._rows = block, index, sink, rows

    def __call__(self, x, *args, **kwargs):
        if self._index == 0:
            self._sink[0] = self._keep(x)
        out = self._block(x, *args, **kwargs)
        self._sink[self._index + 1] = self._keep(out[0] if isinstance(out, tuple) else out)
        return out

    def _keep(self, h: mx.array) -> mx.array:
        return h[0] if self._rows is None else h[0][self._rows]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._block, name)


class _Trim:
    """Stands in for the inner model for one call of the outer one: runs it and hands on
    only ``rows``, so the head runs where its logits are wanted."""

    def __init__(self, inner: Any, rows: mx.array) -> None:
        self._inner, self._rows = inner, rows

    def __call__(self, *args, **kwargs) -> mx.array:
        return self._inner(*args, **kwargs)[:, self._rows]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Fixed:
    """Stands in for the inner model for one call of the outer one: returns ``value``
    (and answers ``embed_tokens`` with a stand-in for a tied head, when given one)."""

    def __init__(self, inner: Any, value: mx.array, embed_tokens: Any = None) -> None:
        self._inner, self._value = inner, value
        if embed_tokens is not None:
            self.embed_tokens = embed_tokens

    def __call__(self, *args, **kwargs) -> mx.array:
        return self._value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _arch(loaded: LoadedModel) -> str:
    return str(loaded.config.get("model_type", type(loaded.model).__name__))


def _parts(loaded: LoadedModel) -> tuple[Any, list, Any]:
    model = loaded.model
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    norm = next((getattr(inner, n) for n in NORM_NAMES if inner is not None and hasattr(inner, n)), None)
    if inner is None or not isinstance(layers, list) or not layers or norm is None:
        raise EngineError(f"the logit lens cannot walk the blocks of a {_arch(loaded)} model.")
    return inner, layers, norm


def _forward(
    loaded: LoadedModel, tokens: Sequence[int], rows: Sequence[int] | None, logit_rows: Sequence[int] | None, caches
) -> tuple[list[mx.array], mx.array]:
    """One pass over ``tokens`` (after what ``caches`` hold, when given): the residual
    stream ``[h_0 … h_L]`` at ``rows`` and the model's own logits at ``logit_rows`` (None:
    every position)."""
    model = loaded.model
    inner, layers, _ = _parts(loaded)
    sink: dict[int, mx.array] = {}
    originals = list(layers)
    keep = None if rows is None else mx.array(list(rows))
    try:
        layers[:] = [_Recorder(b, i, sink, keep) for i, b in enumerate(originals)]
        if logit_rows is not None:
            model["model"] = _Trim(inner, mx.array(list(logit_rows)))
        inputs = mx.array(list(tokens))[None]
        logits = model(inputs) if caches is None else model(inputs, cache=caches)
    finally:
        layers[:] = originals
        model["model"] = inner
    if len(sink) != len(originals) + 1:
        raise EngineError(f"the logit lens cannot walk the blocks of a {_arch(loaded)} model (not every block ran).")
    return [sink[i] for i in range(len(originals) + 1)], logits[0]


def hidden_states(loaded: LoadedModel, tokens: Sequence[int]) -> tuple[list[mx.array], mx.array]:
    """``([h_0 … h_L] each [T, D], logits [T, V])`` of one forward pass over ``tokens``."""
    return _forward(loaded, tokens, None, None, None)


# The head -----------------------------------------------------------------------------


def _on_host() -> bool:
    return mx.default_device() == mx.cpu if HOST_HEAD is None else HOST_HEAD


_QUANTIZED = (nn.QuantizedLinear, nn.QuantizedEmbedding)
_HEADS = (nn.Linear, nn.Embedding, *_QUANTIZED)
_host_heads: dict[int, np.ndarray] = {}


def _dense_rows(module: Any, a: int, b: int) -> np.ndarray:
    """Rows ``a:b`` of ``module``'s weight as float32 on the host (dequantized as stored)."""
    if isinstance(module, _QUANTIZED):
        biases = module["biases"][a:b] if "biases" in module else None
        w = mx.dequantize(
            module["weight"][a:b],
            module["scales"][a:b],
            biases,
            group_size=module.group_size,
            bits=module.bits,
            mode=getattr(module, "mode", "affine"),
        )
    else:
        w = module["weight"][a:b]
    return np.array(w.astype(mx.float32))


class _HostProduct:
    """Stands in for the unembedding (``lm_head``, or the embedding's ``as_linear``) for one
    call: ``x @ W.T (+ bias)`` on the host, rounded to what the model's own product gives."""

    def __init__(self, module: Any, placeholder: bool) -> None:
        self._module, self._placeholder = module, placeholder
        self.result: np.ndarray | None = None
        self.returned: mx.array | None = None

    def __call__(self, x: mx.array) -> mx.array:
        return self._product(x)

    def as_linear(self, x: mx.array) -> mx.array:
        return self._product(x)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def _product(self, x: mx.array) -> mx.array:
        self.result = self.result if self.result is not None else self._compute(x)
        shape = (*x.shape[:-1], self.result.shape[-1])
        # A placeholder costs nothing unless evaluated: a model that hands it back as it
        # is (most do) never needs the product as an MLX array.
        real = mx.zeros(shape, x.dtype) if self._placeholder else mx.array(self.result).astype(x.dtype).reshape(shape)
        self.returned = real
        return real

    def _compute(self, x: mx.array) -> np.ndarray:
        rows = np.array(x.reshape(-1, x.shape[-1]).astype(mx.float32))
        module = self._module
        vocab = module["weight"].shape[0]
        dense = _host_heads.get(id(module))
        if dense is None and vocab * rows.shape[1] * 4 <= HOST_HEAD_BYTES:
            dense = np.empty((vocab, rows.shape[1]), np.float32)
            for a in range(0, vocab, _CHUNK):
                dense[a : a + _CHUNK] = _dense_rows(module, a, a + _CHUNK)
            _host_heads[id(module)] = dense
            weakref.finalize(module, _host_heads.pop, id(module), None)
        if dense is not None:
            out = rows @ dense.T
        else:  # too big to keep: a chunk of the vocabulary at a time
            out = np.empty((rows.shape[0], vocab), np.float32)
            for a in range(0, vocab, _CHUNK):
                out[:, a : a + _CHUNK] = rows @ _dense_rows(module, a, a + _CHUNK).T
        if isinstance(module, nn.Linear | nn.QuantizedLinear) and "bias" in module:
            out += np.array(module["bias"].astype(mx.float32))
        return _rounded(out, x.dtype)


def _rounded(a: np.ndarray, dtype: mx.Dtype) -> np.ndarray:
    """float32 ``a`` rounded to ``dtype`` (nearest, ties to even) and back."""
    if dtype == mx.float16:
        return a.astype(np.float16).astype(np.float32)
    if dtype == mx.bfloat16:
        bits = a.view(np.uint32)
        bits = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
        return bits.view(np.float32)
    return a


def _head_logits(loaded: LoadedModel, h: mx.array) -> np.ndarray:
    """``head(final_norm(h))`` for rows ``h`` ``[N, D]`` through the model's own code:
    logits ``[N, V]`` float32 on the host."""
    inner, _, norm = _parts(loaded)
    normed = norm(h)[None]
    if not _on_host():
        return np.array(_run_head(loaded.model, inner, normed, None, None)[0].astype(mx.float32))
    model = loaded.model
    embed = getattr(inner, "embed_tokens", None)
    lm_head = model.get("lm_head")
    tied = _HostProduct(embed, placeholder=True) if isinstance(embed, _HEADS) else None
    untied = _HostProduct(lm_head, placeholder=True) if isinstance(lm_head, _HEADS) else None
    out = _run_head(model, inner, normed, tied, untied)
    used = next((p for p in (untied, tied) if p is not None and p.returned is not None), None)
    if used is None:  # the head is some other module: the model's own code ran it
        return np.array(out[0].astype(mx.float32))
    if used.returned is out:  # handed back as it is: the product is the logits
        return used.result
    used._placeholder = False  # the model works on the product (softcapping): again, with it
    return np.array(_run_head(model, inner, normed, tied, untied)[0].astype(mx.float32))


def _run_head(model: Any, inner: Any, normed: mx.array, tied: Any, untied: Any) -> mx.array:
    """The outer model's call on ``normed`` as its inner model's output, with stand-ins for
    its tied or untied head when given."""
    head = model["lm_head"] if untied is not None else None
    model["model"] = _Fixed(inner, normed, tied)
    if untied is not None:
        model["lm_head"] = untied
    try:
        return model(mx.zeros((1, normed.shape[1]), mx.int32))
    finally:
        model["model"] = inner
        if head is not None:
            model["lm_head"] = head


def read_out(loaded: LoadedModel, h: mx.array) -> mx.array:
    """``head(final_norm(h))`` through the model's own head: logits ``[N, V]`` float32."""
    return mx.array(_head_logits(loaded, h))


# The lens -----------------------------------------------------------------------------


def lens(loaded: LoadedModel, tokens: Sequence[int], positions: Sequence[int], top: int = 10) -> Iterator[LensPosition]:
    """The lens at each of ``positions`` (indices into ``tokens``: the distribution of the
    token after it), a generator: stop iterating to cancel. One forward pass over
    ``tokens[: max(positions) + 1]``, then the read-outs, ``GROUP`` positions at a time."""
    return lens_continued(loaded, tokens, positions, top, 0, None)


def lens_continued(
    loaded: LoadedModel, tokens: Sequence[int], positions: Sequence[int], top: int, start: int, caches: list | None
) -> Iterator[LensPosition]:
    """:func:`lens`, the forward pass continuing ``caches`` (the model's per-layer caches
    holding exactly ``tokens[:start]``, which this pass extends: give it a copy) over
    ``tokens[start : max(positions) + 1]``; every position must be at least ``start``."""
    tokens = [int(t) for t in tokens]
    positions = [int(p) for p in positions]
    if not tokens or not positions or any(not 0 <= p < len(tokens) for p in positions):
        raise EngineError(f"positions must be in [0, {len(tokens) - 1}], got {positions[:5]}.")
    if not 1 <= top <= 100:
        raise EngineError(f"top must be in [1, 100], got {top}.")
    if not 0 <= start <= min(positions) or (start and caches is None):
        raise EngineError(f"a cache of {start} tokens cannot give positions from {min(positions)}.")
    return _lens(loaded, tokens, positions, top, start, caches)


def _lens(
    loaded: LoadedModel, tokens: list[int], positions: list[int], top: int, start: int, caches: list | None
) -> Iterator[LensPosition]:
    last = max(positions)
    rows = [p - start for p in positions]
    states, raw = _forward(loaded, tokens[start : last + 1], rows, [last - start], caches)
    mx.eval(states, raw)
    at = positions.index(last)
    check = _head_logits(loaded, states[-1][at : at + 1])
    if not np.allclose(check, np.array(raw.astype(mx.float32)), atol=1e-3, rtol=1e-3):
        arch = _arch(loaded)
        raise EngineError(f"the logit lens cannot walk a {arch} model: its last layer does not give its logits.")
    size = max(1, min(GROUP, READ_OUT_VALUES // (len(states) * check.shape[-1])))
    for a in range(0, len(positions), size):  # L + 1 distributions of V per position: a few at a time
        group = positions[a : a + size]
        h = mx.concatenate([s[a : a + len(group)] for s in states])
        logits = _head_logits(loaded, h).reshape(len(states), len(group), -1)
        yield from _summaries(group, logits, tokens, top)


def _summaries(group: list[int], logits: np.ndarray, tokens: list[int], top: int) -> Iterator[LensPosition]:
    """``LensPosition``s of ``group`` from its logits ``[L + 1, G, V]`` (overwritten)."""
    lp, entropy, kl = log_softmax_entropy_kl(logits)
    ids, values = top_n(lp, top)
    final_top = ids[-1, :, 0]
    nxt = [p + 1 < len(tokens) for p in group]
    chosen = np.array([tokens[p + 1] if nxt[k] else int(final_top[k]) for k, p in enumerate(group)])
    rank_final, _ = rank(lp, final_top)
    rank_chosen, chosen_lp = rank(lp, chosen)
    finals = np.take_along_axis(lp, np.broadcast_to(ids[-1][None], ids.shape), axis=-1)
    for k, p in enumerate(group):
        layers = tuple(
            LensLayer(
                position=p,
                layer=layer,
                top=tuple(zip(ids[layer, k].tolist(), values[layer, k].tolist(), strict=True)),
                entropy=float(entropy[layer, k]),
                kl_final=max(0.0, float(kl[layer, k])),
                rank_final_top1=int(rank_final[layer, k]),
                rank_chosen=int(rank_chosen[layer, k]),
                chosen_logprob=float(chosen_lp[layer, k]),
                final_top_logprobs=tuple(finals[layer, k].tolist()),
            )
            for layer in range(lp.shape[0])
        )
        decided = None
        for layer in range(lp.shape[0] - 1, -1, -1):
            if ids[layer, k, 0] != chosen[k]:
                break
            decided = layer
        yield LensPosition(p, int(chosen[k]), nxt[k], decided, layers)
