"""Convert a GGUF file into an mlx-lm model folder.

1. ``engine.models.gguf_read`` parses the file with gguf-py and validates the header,
   the metadata and every tensor's type, shape and offset against the file
   size before any tensor data is touched. MLX's own GGUF reader is never used.
2. ``engine.models.gguf_arch`` builds mlx-lm's ``config.json`` for the architecture
   (numbers cross-checked against the tensor shapes) and maps tensor names
   through gguf-py's table onto the mlx-lm model's parameter names.
3. ``engine.models.gguf_quant`` turns each tensor into MLX arrays: float types as they
   are, affine-compatible block types repacked bit for bit, the rest
   dequantized to float16.
4. ``engine.models.gguf_tokenizer`` builds the tokenizer with transformers' GGUF
   conversion.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from engine.api.errors import ModelLoadError
from engine.library.convertible import ARCHITECTURES, FLOAT_TYPES, SUPPORTED
from engine.models.gguf_arch import CONFIG_TENSORS, build_config, norm_offset, parameter_names
from engine.models.gguf_quant import GROUP_SIZE, convert
from engine.models.gguf_read import GGUFFile, GGUFTensor, read_gguf
from engine.models.gguf_tokenizer import write_tokenizer_files

ProgressFn = Callable[[str, float], None]
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)
_TYPE_NAMES = ", ".join(t.name for t in SUPPORTED)


def _config_tensor(tensor: GGUFTensor, path: Path) -> np.ndarray:
    if tensor.qtype not in FLOAT_TYPES[:2]:
        raise ModelLoadError(path, f"tensor {tensor.name!r} must be F32 or F16 (it is {tensor.type_name})")
    return np.asarray(tensor.data, np.float32)


def _to_mlx(arch: str, tensor: GGUFTensor, mlx_name: str, path: Path) -> tuple[dict[str, mx.array], int | None]:
    if tensor.qtype not in SUPPORTED:
        raise ModelLoadError(
            path, f"tensor {tensor.name!r} has unsupported type {tensor.type_name} (supported: {_TYPE_NAMES})"
        )
    if mlx_name.endswith(".bias") and tensor.qtype not in FLOAT_TYPES:
        raise ModelLoadError(path, f"bias {tensor.name!r} is quantized ({tensor.type_name})")
    try:
        parts, bits = convert(tensor.qtype, tensor.data, tensor.shape)
    except ValueError as exc:
        raise ModelLoadError(path, f"tensor {tensor.name!r}: {exc}") from None
    offset = norm_offset(arch, tensor.name)
    module, suffix = mlx_name.rsplit(".", 1)
    arrays: dict[str, mx.array] = {}
    for part, value in parts.items():
        if offset and part == "weight":  # undo llama.cpp's +1 in float32, then back to the stored type
            value = (value.astype(np.float32) - np.float32(offset)).astype(value.dtype)
        array = mx.array(value)
        if tensor.qtype.name == "BF16":
            array = array.view(mx.bfloat16)
        arrays[mlx_name if part == "weight" else f"{module}.{part}"] = array
    if suffix != "weight" and bits is not None:
        raise ModelLoadError(path, f"tensor {tensor.name!r} is quantized but is not a weight")
    return arrays, bits


def model_config(gguf: GGUFFile) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(architecture, mlx-lm config, GGUF tensor name -> mlx-lm parameter name)."""
    path = gguf.path
    arch = gguf.metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ModelLoadError(
            path, f"unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    shapes = {name: t.shape for name, t in gguf.tensors.items()}
    extra = {name: _config_tensor(gguf.tensors[name], path) for name in CONFIG_TENSORS if name in gguf.tensors}
    config = build_config(arch, gguf.metadata, shapes, extra, path)
    try:
        names = parameter_names(config, arch, list(gguf.tensors), path)
    except ModelLoadError:
        raise
    except Exception as exc:  # mlx-lm rejecting the config
        raise ModelLoadError(path, f"mlx-lm cannot build a {arch} model ({type(exc).__name__}: {exc})") from None
    return arch, config, names


def convert_gguf(path: Path, out_dir: Path, progress: ProgressFn | None = None) -> None:
    """Write an mlx-lm folder for ``path`` into ``out_dir`` (which must exist, empty)."""
    report = progress or (lambda stage, fraction: None)
    report("reading GGUF", 0.0)
    gguf = read_gguf(path)
    arch, config, names = model_config(gguf)
    report("building tokenizer", 0.1)
    config["eos_token_id"] = write_tokenizer_files(arch, gguf.metadata, out_dir, path)
    weights: dict[str, mx.array] = {}
    quantized: dict[str, dict[str, int]] = {}
    for i, (gguf_name, mlx_name) in enumerate(names.items()):
        if i % 16 == 0:
            report("converting tensors", round(0.2 + 0.6 * i / len(names), 4))
        arrays, bits = _to_mlx(arch, gguf.tensors[gguf_name], mlx_name, path)
        weights.update(arrays)
        if bits is not None:
            quantized[mlx_name.rsplit(".", 1)[0]] = {"group_size": GROUP_SIZE, "bits": bits}
    if quantized:
        # mlx-lm reads per-layer entries keyed by module path; the top level is a fallback.
        common = Counter(q["bits"] for q in quantized.values()).most_common(1)[0][0]
        config["quantization"] = {"group_size": GROUP_SIZE, "bits": common, **quantized}
    report("writing weights", 0.8)
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    report("converted", 1.0)
