"""GGUF tensor types -> MLX arrays, without requantizing where the formats line up.

MLX's affine quantization stores ``w = scale * q + bias`` for groups of 32
consecutive weights, ``q`` an unsigned ``bits``-bit integer packed into uint32
words as a little-endian bit stream. Several ggml block formats are exactly
that, up to where the scale and bias come from:

==========  ====  ================================  =================
ggml type   bits  scale                             bias
==========  ====  ================================  =================
Q4_0        4     d                                 -8 d
Q4_1        4     d                                 m
Q5_0        5     d                                 -16 d
Q5_1        5     d                                 m
Q8_0        8     d   (q stored as int8; +128)      -128 d
Q4_K        4     d * sc[j]  (8 sub-blocks of 32)   -dmin * m[j]
Q5_K        5     d * sc[j]                         -dmin * m[j]
==========  ====  ================================  =================

These convert bit for bit: the integers are repacked, and scale and bias are
kept exactly: float16 for the first five (their scales are float16 already, and
``-8d``, ``-16d``, ``-128d`` are exact), float32 for Q4_K / Q5_K, whose products
``d * sc`` and ``dmin * m`` need more bits than float16 has (rounding them moved a
real Gemma 3's top-5 logprobs by 0.03 nats at 600 tokens of context). Q2_K, Q3_K
and Q6_K use sub-blocks of 16 weights, a group size MLX does not have, so gguf-py
dequantizes them and they are kept as float16.
F32, F16 and BF16 tensors keep their type.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from engine.library.convertible import AFFINE_BITS, TO_FLOAT16

GROUP_SIZE = 32
_BLOCK_BYTES = {T.Q4_0: 18, T.Q4_1: 20, T.Q5_0: 22, T.Q5_1: 24, T.Q8_0: 34, T.Q4_K: 144, T.Q5_K: 176}


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """A float16 field of every block, as float32 [n, 1]."""
    return blocks[:, start : start + 2].copy().view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32]: the low nibbles are elements 0..15, the high ones 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes (a little-endian uint32 per block) -> [n, 32] bits, element j from bit j."""
    return np.unpackbits(qh, axis=-1, bitorder="little")


def _k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 packed bytes of Q4_K / Q5_K -> 8 six-bit scales and 8 six-bit minimums."""
    n = scales.shape[0]
    d, m, m_d = np.split(scales.reshape(n, 3, 4), 3, axis=1)
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1).reshape(n, 8)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1).reshape(n, 8)
    return sc.astype(np.float32), mn.astype(np.float32)


def decode_affine(raw: np.ndarray, qtype: T) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks of one affine-compatible type -> (q uint8 [n, 32 per group], scales, biases float32 [n, groups]).

    ``raw`` is [rows, bytes per row]; the results are [rows, columns] and [rows, columns / 32].
    """
    rows = raw.shape[0]
    b = np.ascontiguousarray(raw).reshape(-1, _BLOCK_BYTES[qtype])
    if qtype == T.Q4_0:
        d = _f16(b, 0)
        q, scale, bias = _nibbles(b[:, 2:18]), d, -8.0 * d
    elif qtype == T.Q4_1:
        d = _f16(b, 0)
        q, scale, bias = _nibbles(b[:, 4:20]), d, _f16(b, 2)
    elif qtype == T.Q5_0:
        d = _f16(b, 0)
        q, scale, bias = _nibbles(b[:, 6:22]) | (_high_bits(b[:, 2:6]) << 4), d, -16.0 * d
    elif qtype == T.Q5_1:
        d = _f16(b, 0)
        q, scale, bias = _nibbles(b[:, 8:24]) | (_high_bits(b[:, 4:8]) << 4), d, _f16(b, 2)
    elif qtype == T.Q8_0:
        d = _f16(b, 0)
        q, scale, bias = b[:, 2:34] ^ np.uint8(0x80), d, -128.0 * d
    elif qtype in (T.Q4_K, T.Q5_K):
        n = b.shape[0]
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, mn = _k_scales(b[:, 4:16])
        qs = b[:, -128:].reshape(n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
        q = (qs & 0x0F).reshape(n, 8, 32)
        if qtype == T.Q5_K:
            qh = b[:, 16:48].reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
            q = q | ((qh & 1) << 4)
        q, scale, bias = q.reshape(n, 256), d * sc, -(dmin * mn)
    else:
        raise ValueError(f"{qtype.name} is not an affine-compatible type")
    return q.reshape(rows, -1), scale.reshape(rows, -1), bias.reshape(rows, -1)


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """[rows, columns] integers < 2**bits -> MLX's packing: uint32 [rows, columns * bits / 32].

    Element i takes bits ``i * bits .. (i + 1) * bits`` of the row read as one little-endian stream;
    eight elements fill ``bits`` bytes exactly, so each group of eight is assembled in a uint64.
    """
    rows, cols = q.shape
    if bits == 8:
        return np.ascontiguousarray(q, dtype=np.uint8).view(np.uint32)
    if bits == 4:
        q = q.astype(np.uint8).reshape(rows, cols // 2, 2)
        return np.ascontiguousarray(q[..., 0] | (q[..., 1] << 4)).view(np.uint32)
    eights = q.astype(np.uint64).reshape(rows, cols // 8, 8) << (np.arange(8, dtype=np.uint64) * np.uint64(bits))
    words = np.bitwise_or.reduce(eights, axis=-1)
    packed = words.reshape(rows, cols // 8, 1).view(np.uint8)[..., :bits]
    return np.ascontiguousarray(packed).reshape(rows, -1).view(np.uint32)


_EXACT_SCALES = {T.Q4_K: np.float32, T.Q5_K: np.float32}  # else float16 holds them exactly


def convert(qtype: T, data: np.ndarray, shape: tuple[int, ...], float_dtype=None) -> tuple[dict, int | None]:
    """One GGUF tensor -> ({"weight": ..., ["scales", "biases"]}: numpy arrays, bits or None).

    ``shape`` is the tensor's numpy shape; quantized tensors must be 2-D (rows of blocks).
    BF16 comes back as uint16 (numpy has no bfloat16); the caller views it as bfloat16.
    ``float_dtype`` forces the type of scales and biases (default: the narrowest exact one).
    """
    if qtype == T.F32:
        return {"weight": data.view(np.float32).reshape(shape)}, None
    if qtype == T.F16:
        return {"weight": data.view(np.float16).reshape(shape)}, None
    if qtype == T.BF16:
        return {"weight": data.view(np.uint16).reshape(shape)}, None
    if qtype in TO_FLOAT16:
        return {"weight": dequantize(data, qtype).reshape(shape).astype(np.float16)}, None
    if qtype not in AFFINE_BITS:
        raise ValueError(f"type {qtype.name} is not supported")
    if len(shape) != 2:
        raise ValueError(f"a quantized tensor must be 2-D (it is {list(shape)})")
    bits = AFFINE_BITS[qtype]
    q, scales, biases = decode_affine(data.reshape(shape[0], -1), qtype)
    float_dtype = float_dtype or _EXACT_SCALES.get(qtype, np.float16)
    return {
        "weight": pack(q, bits),
        "scales": scales.astype(float_dtype),
        "biases": biases.astype(float_dtype),
    }, bits
