"""Convert a llama-family GGUF file into an mlx-lm model folder.

``mx.load`` reads GGUF and keeps Q4_0 / Q4_1 / Q8_0 tensors as MLX
affine-quantized weights (``weight`` + ``scales`` + ``biases``, group size 32).
This module renames the tensors to mlx-lm's llama names, writes
``config.json`` (with per-layer bits read off each tensor's shape), and builds
a ``tokenizer.json`` from the ``tokenizer.ggml.*`` metadata.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from engine.errors import ModelLoadError
from engine.gguf_tokenizer import write_tokenizer_files

ProgressFn = Callable[[str, float], None]

GROUP_SIZE = 32
SUPPORTED_ARCHITECTURES = ("llama",)
# GGUF file types (general.file_type) whose tensors mx.load turns into
# float or affine-quantized arrays we can use: F32, F16, Q4_0, Q4_1, Q8_0.
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|scales|biases|bias)$")
_TOP = re.compile(r"^([a-z_]+)\.(weight|scales|biases|bias)$")


def read_gguf(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """Read tensors and metadata; any failure becomes a ModelLoadError."""
    try:
        weights, metadata = mx.load(str(path), return_metadata=True)
    except Exception as exc:  # mlx raises RuntimeError/ValueError with terse messages
        raise ModelLoadError(path, f"not a readable GGUF file ({exc})") from None
    if not isinstance(weights, dict) or not weights:
        raise ModelLoadError(path, "the GGUF file holds no tensors")
    return weights, metadata


def _scalar(metadata: dict[str, Any], key: str, path: Path, default: Any = None) -> Any:
    value = metadata.get(key, default)
    if value is None:
        raise ModelLoadError(path, f"GGUF metadata lacks {key!r}")
    if isinstance(value, mx.array):
        return value.item()
    return value


def rename_tensors(weights: dict[str, mx.array], path: Path) -> dict[str, mx.array]:
    """GGUF llama tensor names -> mlx-lm llama names."""
    renamed: dict[str, mx.array] = {}
    for name, tensor in weights.items():
        block = _BLOCK.match(name)
        top = _TOP.match(name)
        if block and block.group(2) in _LAYER_NAMES:
            layer, part, kind = block.groups()
            renamed[f"model.layers.{layer}.{_LAYER_NAMES[part]}.{kind}"] = tensor
        elif top and top.group(1) in _TOP_NAMES:
            renamed[f"{_TOP_NAMES[top.group(1)]}.{top.group(2)}"] = tensor
        elif name.startswith("rope_freqs") or name.endswith("attn_rot_embd"):
            continue  # derived from metadata; mlx-lm recomputes them
        else:
            raise ModelLoadError(path, f"unsupported tensor {name!r} for a llama model")
    return renamed


def quantization_of(weights: dict[str, mx.array], path: Path) -> dict[str, Any]:
    """Per-layer {group_size, bits} read off the packed weight shapes.

    A quantized weight is uint32 [out, in * bits / 32] with scales [out, in / 32].
    """
    layers: dict[str, Any] = {}
    for name, tensor in weights.items():
        if not name.endswith(".scales"):
            continue
        prefix = name[: -len(".scales")]
        packed = weights.get(prefix + ".weight")
        if packed is None or packed.dtype != mx.uint32:
            raise ModelLoadError(path, f"tensor {prefix!r} has scales but no packed weight")
        in_features = tensor.shape[-1] * GROUP_SIZE
        bits = packed.shape[-1] * 32 // in_features
        if bits not in (4, 8):
            raise ModelLoadError(path, f"tensor {prefix!r} has an unsupported bit width ({bits})")
        layers[prefix] = {"group_size": GROUP_SIZE, "bits": bits}
    for name, tensor in weights.items():
        if name.endswith(".weight") and tensor.dtype not in (
            mx.float32,
            mx.float16,
            mx.bfloat16,
            mx.uint32,
        ):
            raise ModelLoadError(path, f"tensor {name!r} has unsupported type {tensor.dtype}")
        if tensor.dtype == mx.uint32 and name[: -len(".weight")] not in layers:
            raise ModelLoadError(path, f"tensor {name!r} uses an unsupported quantization type")
    return layers


def llama_config(metadata: dict[str, Any], weights: dict[str, mx.array], path: Path) -> dict:
    arch = _scalar(metadata, "general.architecture", path)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            path,
            f"unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHITECTURES)})",
        )
    p = f"{arch}."
    heads = int(_scalar(metadata, p + "attention.head_count", path))
    hidden = int(_scalar(metadata, p + "embedding_length", path))
    vocab = metadata.get(p + "vocab_size")
    vocab_size = int(vocab.item()) if isinstance(vocab, mx.array) else None
    if vocab_size is None:
        vocab_size = len(metadata.get("tokenizer.ggml.tokens", []))
    config: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(_scalar(metadata, p + "block_count", path)),
        "intermediate_size": int(_scalar(metadata, p + "feed_forward_length", path)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_scalar(metadata, p + "attention.head_count_kv", path, heads)),
        "rms_norm_eps": float(_scalar(metadata, p + "attention.layer_norm_rms_epsilon", path)),
        "vocab_size": vocab_size,
        "max_position_embeddings": int(_scalar(metadata, p + "context_length", path, 2048)),
        "rope_theta": float(_scalar(metadata, p + "rope.freq_base", path, 10000.0)),
        # llama GGUF files store Q and K in the interleaved rotary layout.
        "rope_traditional": True,
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "head_dim": int(_scalar(metadata, p + "rope.dimension_count", path, hidden // heads)),
    }
    quant = quantization_of(weights, path)
    if quant:
        # mlx-lm reads per-layer entries keyed by module path.
        config["quantization"] = {"group_size": GROUP_SIZE, "bits": 4, **quant}
    return config


def convert_gguf(path: Path, out_dir: Path, progress: ProgressFn | None = None) -> None:
    """Write an mlx-lm folder for ``path`` into ``out_dir`` (which must exist, empty)."""
    report = progress or (lambda stage, fraction: None)
    report("reading GGUF", 0.0)
    weights, metadata = read_gguf(path)
    report("mapping tensors", 0.3)
    renamed = rename_tensors(weights, path)
    config = llama_config(metadata, renamed, path)
    report("building tokenizer", 0.4)
    eos_ids = write_tokenizer_files(metadata, out_dir, path)
    config["eos_token_id"] = eos_ids
    report("writing weights", 0.6)
    mx.save_safetensors(str(out_dir / "model.safetensors"), renamed, metadata={"format": "mlx"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    report("converted", 1.0)
