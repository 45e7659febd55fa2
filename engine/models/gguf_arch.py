"""GGUF architectures -> mlx-lm model configs and parameter names.

How each architecture was written comes from llama.cpp's ``convert_hf_to_gguf.py``:

- ``llama`` (also Mistral-style files, which use it): Q and K rows are permuted
  for interleaved rotary embeddings; mlx-lm reads them as they are with
  ``rope_traditional: true``. Llama 3.1-style scaling is stored as a
  ``rope_freqs`` tensor; its parameters are recovered from it.
- ``qwen2`` (q/k/v biases), ``qwen3`` (q_norm / k_norm): written as in
  Hugging Face.
- ``gemma2``, ``gemma3`` (-> mlx-lm ``gemma3_text``): every ``*norm.weight`` is
  stored plus one (Gemma's RMSNorm scales by ``1 + w``); the attention scale
  follows llama.cpp (``n_embd / n_head`` for the 27B models, else head_dim).
- ``phi3``: ``attn_qkv`` and ``ffn_up`` (gate and up) stay fused, as in mlx-lm;
  LongRoPE factors are stored as ``rope_factors_long`` / ``_short`` tensors.

Tensor names map through gguf-py's own table (``gguf.get_tensor_name_map``)
applied to the parameter names of the mlx-lm model class.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engine.api.errors import ModelLoadError
from engine.library.convertible import ARCHITECTURES

# Tensors that become config values, not parameters.
CONFIG_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
_BLOCK = re.compile(r"^blk\.(\d+)\.")
_MAX_INT = 1 << 31


class _Meta:
    """Typed, range-checked access to one architecture's metadata keys."""

    def __init__(self, metadata: Mapping[str, Any], arch: str, path: Path) -> None:
        self.metadata, self.prefix, self.path = metadata, arch + ".", path

    def fail(self, reason: str) -> ModelLoadError:
        return ModelLoadError(self.path, reason)

    def raw(self, key: str) -> Any:
        return self.metadata.get(self.prefix + key)

    def int(self, key: str, default: int | None = None, low: int = 1, high: int = _MAX_INT) -> int:
        value = self.raw(key)
        if isinstance(value, list) and value and all(v == value[0] for v in value):
            value = value[0]  # a per-layer array that says the same for every layer
        if value is None:
            if default is None:
                raise self.fail(f"GGUF metadata lacks {self.prefix + key!r}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(f"GGUF metadata {self.prefix + key!r} = {value!r} is not a whole number in {low}..{high}")
        return value

    def float(self, key: str, default: float | None = None, positive: bool = True) -> float:
        value = self.raw(key)
        if value is None:
            if default is None:
                raise self.fail(f"GGUF metadata lacks {self.prefix + key!r}")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"GGUF metadata {self.prefix + key!r} = {value!r} is not a number")
        value = float(value)
        if not math.isfinite(value) or (positive and value <= 0):
            raise self.fail(f"GGUF metadata {self.prefix + key!r} = {value!r} is out of range")
        return value


def _rows(shapes: Mapping[str, tuple[int, ...]], name: str, meta: _Meta) -> int:
    shape = shapes.get(name)
    if shape is None or len(shape) != 2:
        raise meta.fail(f"the GGUF file lacks a 2-D tensor {name!r}")
    return shape[0]


def _rope_scaling(meta: _Meta, arch: str, context: int) -> dict[str, Any] | None:
    kind, factor_key = meta.raw("rope.scaling.type"), "rope.scaling.factor"
    if kind in (None, "none") and meta.raw("rope.scale_linear") is not None:  # older files
        kind, factor_key = "linear", "rope.scale_linear"
    if kind in (None, "none"):
        return None
    if not (kind == "linear" and arch != "gemma2") and not (kind == "yarn" and arch in ("llama", "qwen2", "qwen3")):
        raise meta.fail(f"rope scaling {kind!r} is not supported for {arch!r}")
    factor = meta.float(factor_key)
    if kind == "linear":
        return {"type": "linear", "rope_type": "linear", "factor": factor}
    scaling = {"rope_type": "yarn", "type": "yarn", "factor": factor}
    scaling["original_max_position_embeddings"] = meta.int("rope.scaling.original_context_length", context)
    for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        if meta.raw("rope.scaling." + key) is not None:
            scaling[name] = meta.float("rope.scaling." + key)
    return scaling


def _llama3_scaling(freqs: np.ndarray, head_dim: int, theta: float, original: int, meta: _Meta) -> dict | None:
    """Recover Llama 3.1's rope scaling parameters from the ``rope_freqs`` tensor llama.cpp writes.

    Each factor is 1 (short wavelengths), ``factor`` (long ones) or ``1 / ((1 - s) / factor + s)``
    in between, with ``s = (original / wavelength - low) / (high - low)``: linear in 1 / wavelength,
    so two in-between points give ``low`` and ``high`` for the file's original context length.
    """
    freqs = np.asarray(freqs, np.float64).reshape(-1)
    if freqs.shape[0] != head_dim // 2 or not np.all(np.isfinite(freqs)) or np.any(freqs <= 0):
        raise meta.fail(f"rope_freqs has {freqs.shape[0]} values, not {head_dim // 2} positive ones")
    if np.allclose(freqs, 1.0):
        return None
    factor = float(freqs.max())
    wavelengths = 2 * math.pi * theta ** (np.arange(0, head_dim, 2) / head_dim)
    middle = (freqs > 1 + 1e-6) & (freqs < factor * (1 - 1e-6))
    if factor <= 1 or middle.sum() < 2:
        raise meta.fail("rope_freqs does not follow Llama 3 rope scaling")
    smooth = (1 / freqs[middle] - 1 / factor) / (1 - 1 / factor)
    slope, intercept = np.polyfit(1 / wavelengths[middle], smooth, 1)
    width = original / slope
    low = -intercept * width
    scaling = {
        "rope_type": "llama3",
        "type": "llama3",
        "factor": factor,
        "low_freq_factor": float(low),
        "high_freq_factor": float(low + width),
        "original_max_position_embeddings": original,
    }
    if not np.allclose(llama3_factors(scaling, head_dim, theta), freqs, rtol=1e-3):
        raise meta.fail("rope_freqs does not follow Llama 3 rope scaling")
    return scaling


def llama3_factors(scaling: Mapping[str, Any], head_dim: int, theta: float) -> np.ndarray:
    """The rope_freqs values llama.cpp's converter writes for Llama 3 scaling."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelengths = 2 * math.pi * theta ** (np.arange(0, head_dim, 2) / head_dim)
    smooth = (original / wavelengths - low) / (high - low)
    middle = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelengths < original / high, 1.0, np.where(wavelengths > original / low, factor, middle))


def build_config(
    arch: str,
    metadata: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]],
    config_tensors: Mapping[str, np.ndarray],
    path: Path,
) -> dict[str, Any]:
    """The mlx-lm config.json for a GGUF of ``arch``; numbers are checked against the tensor shapes."""
    meta = _Meta(metadata, arch, path)
    if "token_embd.weight" not in shapes or len(shapes["token_embd.weight"]) != 2:
        raise meta.fail("the GGUF file lacks a 2-D token_embd.weight tensor")
    vocab, hidden = shapes["token_embd.weight"]
    if meta.int("embedding_length") != hidden:
        raise meta.fail(f"embedding_length {meta.int('embedding_length')} != token_embd width {hidden}")
    layers = meta.int("block_count", high=4096)
    found = {int(m.group(1)) for name in shapes if (m := _BLOCK.match(name))}
    if found != set(range(layers)):
        raise meta.fail(f"block_count is {layers} but the tensors cover blocks {sorted(found)[:8]}...")
    heads = meta.int("attention.head_count", high=hidden)
    kv_heads = meta.int("attention.head_count_kv", heads, high=heads)
    if heads % kv_heads:
        raise meta.fail(f"head_count {heads} is not a multiple of head_count_kv {kv_heads}")
    head_dim = meta.int("attention.key_length", hidden // heads, high=1 << 16)
    if arch == "phi3":
        qkv = _rows(shapes, "blk.0.attn_qkv.weight", meta)
        q_rows, kv_rows = qkv - 2 * kv_heads * head_dim, kv_heads * head_dim
    else:
        q_rows, kv_rows = _rows(shapes, "blk.0.attn_q.weight", meta), _rows(shapes, "blk.0.attn_k.weight", meta)
    if q_rows != heads * head_dim or kv_rows != kv_heads * head_dim:
        raise meta.fail(f"attention tensors do not match {heads} heads, {kv_heads} KV heads of size {head_dim}")
    ff = meta.int("feed_forward_length")
    ff_rows = _rows(shapes, "blk.0.ffn_up.weight", meta)
    if ff_rows != (2 * ff if arch == "phi3" else ff):
        raise meta.fail(f"feed_forward_length {ff} does not match ffn_up ({ff_rows} rows)")
    context = meta.int("context_length", 4096)
    theta = meta.float("rope.freq_base", 10000.0)
    rope_dims = meta.int("rope.dimension_count", head_dim, high=head_dim)
    if rope_dims != head_dim and arch != "phi3":
        raise meta.fail(f"partial rotary embeddings ({rope_dims} of {head_dim}) are not supported for {arch!r}")
    config: dict[str, Any] = {
        "model_type": ARCHITECTURES[arch],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": ff,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": meta.float("attention.layer_norm_rms_epsilon"),
        "vocab_size": vocab,
        "max_position_embeddings": context,
        "rope_theta": theta,
        "tie_word_embeddings": "output.weight" not in shapes,
    }
    scaling = _rope_scaling(meta, arch, context)
    if arch == "llama":
        config["rope_traditional"] = True  # Q/K rows are in llama.cpp's interleaved order
        config["attention_bias"] = "blk.0.attn_q.bias" in shapes
        config["mlp_bias"] = "blk.0.ffn_up.bias" in shapes
        if "rope_freqs.weight" in config_tensors:
            original = meta.int("rope.scaling.original_context_length", 8192)
            scaling = _llama3_scaling(config_tensors["rope_freqs.weight"], head_dim, theta, original, meta)
    elif arch in ("gemma2", "gemma3"):
        big = layers == (46 if arch == "gemma2" else 62)  # llama.cpp: the 27B models scale by n_embd / n_head
        config["query_pre_attn_scalar"] = hidden // heads if big else head_dim
        if arch == "gemma2":
            config["attn_logit_softcapping"] = meta.float("attn_logit_softcapping", 50.0)
            config["final_logit_softcapping"] = meta.float("final_logit_softcapping", 30.0)
        else:
            config["sliding_window"] = meta.int("attention.sliding_window", 512)
            config["sliding_window_pattern"] = meta.int("attention.sliding_window_pattern", 6, high=layers + 1)
            config["rope_local_base_freq"] = 10000.0  # hard-coded in llama.cpp too
            if meta.raw("final_logit_softcapping") is not None:
                raise meta.fail("gemma3 with final logit soft-capping is not supported")
    elif arch == "phi3":
        config["partial_rotary_factor"] = rope_dims / head_dim
        config["original_max_position_embeddings"] = meta.int("rope.scaling.original_context_length", context)
        if "rope_factors_long.weight" in config_tensors:
            long = np.asarray(config_tensors["rope_factors_long.weight"], np.float64).reshape(-1)
            short = np.asarray(config_tensors.get("rope_factors_short.weight", long), np.float64).reshape(-1)
            if long.shape != (rope_dims // 2,) or short.shape != long.shape:
                raise meta.fail("rope_factors_long / rope_factors_short do not match the rotary dimensions")
            if not (np.all(np.isfinite(long)) and np.all(np.isfinite(short))):
                raise meta.fail("rope_factors_long / rope_factors_short hold non-finite values")
            scaling = {"type": "longrope", "long_factor": long.tolist(), "short_factor": short.tolist()}
    if scaling is not None:
        config["rope_scaling"] = scaling
    return config


def parameter_names(config: dict[str, Any], arch: str, gguf_names: list[str], path: Path) -> dict[str, str]:
    """GGUF tensor name -> mlx-lm parameter name, through gguf-py's tensor-name table."""
    import gguf
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))  # lazy: parameters are never evaluated
    table = gguf.get_tensor_name_map(_arch_enum(arch), config["num_hidden_layers"])
    to_mlx: dict[str, str] = {}
    for name, _ in tree_flatten(model.parameters()):
        gguf_name = table.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is not None:
            to_mlx[gguf_name] = name
    mapping: dict[str, str] = {}
    for name in gguf_names:
        if name in CONFIG_TENSORS or name.endswith(".attn_rot_embd"):
            continue
        if name not in to_mlx:
            raise ModelLoadError(path, f"unsupported tensor {name!r} for a {arch} model")
        mapping[name] = to_mlx[name]
    return mapping


def _arch_enum(arch: str) -> Any:
    import gguf

    return next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)


def norm_offset(arch: str, gguf_name: str) -> float:
    """What llama.cpp's converter added to this tensor (Gemma's norms: +1)."""
    return 1.0 if arch in ("gemma2", "gemma3") and gguf_name.endswith("norm.weight") else 0.0
