"""What a model folder or GGUF file is, from its headers and stat() alone (never its weights)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.library.gguf_header import GGUFHeaderError, read_header
from engine.library.support import gguf_problem, model_type_problem

_DTYPES = {"BF16": "bf16", "F16": "f16", "F32": "f32", "F8_E4M3": "f8", "F8_E5M2": "f8"}


@dataclass(frozen=True)
class Description:
    format: str
    architecture: str | None
    quantization: str | None
    size_bytes: int
    reason: str  # "" when the engine can load it
    quantized: bool  # for the memory estimate


def describe_gguf(path: Path, size: int | None = None) -> Description:
    try:
        size = path.stat().st_size if size is None else size
        header = read_header(path)
    except OSError as exc:
        return Description("gguf", None, None, size or 0, f"cannot read the file ({exc.strerror or exc})", True)
    except GGUFHeaderError as exc:
        return Description("gguf", None, None, size or 0, f"not a readable GGUF file ({exc})", True)
    arch = header.architecture
    reason = gguf_problem(arch, set(header.tensor_types), header.metadata.get("tokenizer.ggml.model"))
    return Description("gguf", arch, _gguf_quantization(header), size, reason, True)


def _gguf_quantization(header: Any) -> str | None:
    """The file type llama.cpp names (``Q4_K_M``), else the commonest tensor type."""
    from gguf import LlamaFileType

    file_type = header.metadata.get("general.file_type")
    if isinstance(file_type, int):
        try:
            name = LlamaFileType(file_type).name
        except ValueError:
            name = ""
        if name:
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    common = header.tensor_types.most_common(1)
    return common[0][0] if common else None


def describe_folder(path: Path, size: int | None = None) -> Description:
    """A folder with config.json: MLX-converted (a ``quantization`` entry, or safetensors saved by
    MLX) or a transformers safetensors folder. ``size``: when the caller knows it already."""
    size = folder_size(path) if size is None else size
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError("not an object")
    except OSError as exc:
        return Description("safetensors", None, None, size, f"cannot read config.json ({exc.strerror or exc})", False)
    except ValueError as exc:
        return Description("safetensors", None, None, size, f"config.json is not valid JSON ({exc})", False)
    arch = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    weights = sorted(path.glob("model*.safetensors"))
    meta, dtype = _safetensors_header(weights[0]) if weights else ({}, None)
    quant = config.get("quantization")
    mlx = isinstance(quant, dict) or meta.get("format") == "mlx"
    quantization, quantized = _folder_quantization(quant, config.get("quantization_config"), dtype)
    reason = model_type_problem(config.get("model_type"))
    if not reason and not weights:
        bins = list(path.glob("*.bin")) or list(path.glob("*.pth"))
        reason = (
            "the weights are PyTorch files; mlx-lm reads only safetensors"
            if bins
            else "no model*.safetensors weights in the folder"
        )
    return Description("mlx" if mlx else "safetensors", arch, quantization, size, reason, quantized)


def _folder_quantization(quant: Any, quant_config: Any, dtype: str | None) -> tuple[str | None, bool]:
    if isinstance(quant, dict) and "bits" in quant:
        mode = quant.get("mode")
        text = f"{quant['bits']}-bit g{quant.get('group_size', 64)}"
        return (f"{text} {mode}" if mode and mode != "affine" else text), True
    if isinstance(quant_config, dict) and quant_config.get("quant_method"):
        return str(quant_config["quant_method"]), True
    return dtype, False


def _safetensors_header(file: Path) -> tuple[dict, str | None]:
    """(``__metadata__``, the commonest weight dtype) from the JSON header: 8 bytes of length, then
    JSON naming each tensor's dtype."""
    try:
        with open(file, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if not 0 < n < 1 << 27:
                return {}, None
            header = json.loads(f.read(n))
    except (OSError, ValueError):
        return {}, None
    meta = header.pop("__metadata__", None) if isinstance(header, dict) else None
    counts: dict[str, int] = {}
    for value in header.values() if isinstance(header, dict) else ():
        dtype = value.get("dtype") if isinstance(value, dict) else None
        if dtype in _DTYPES:
            counts[_DTYPES[dtype]] = counts.get(_DTYPES[dtype], 0) + 1
    dtype = max(counts, key=counts.__getitem__) if counts else None
    return (meta if isinstance(meta, dict) else {}), dtype


def folder_size(path: Path) -> int:
    """Bytes of the folder's files (links followed: a Hugging Face snapshot links to its blobs)."""
    total = 0
    try:
        with os.scandir(path) as it:
            for item in it:
                try:
                    if item.is_file():
                        total += item.stat().st_size
                except OSError:
                    continue
    except OSError:
        return total
    return total
