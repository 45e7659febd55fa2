"""What a model folder or GGUF file is, from its headers and stat() alone (never its weights)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.library.gguf_header import GGUFHeader, GGUFHeaderError, read_header
from engine.library.header_cache import HeaderCache
from engine.library.jsonfile import read_json
from engine.library.safetensors_header import safetensors_facts
from engine.library.support import gguf_problem, model_type_problem

_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.safetensors$")
_MAX_SHARDS = 10_000  # more is no real model: not worth naming every file of
# What a config.json that is not an object holds, in JSON's words.
_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


@dataclass(frozen=True)
class Description:
    format: str
    architecture: str | None
    quantization: str | None
    size_bytes: int
    reason: str  # "" when the engine can load it
    quantized: bool  # for the memory estimate


def describe_gguf(path: Path, cache: HeaderCache | None = None) -> Description:
    try:
        stat = path.stat()
    except OSError as exc:
        return Description("gguf", None, None, 0, f"cannot read the file ({exc.strerror or exc})", True)
    facts = cache.get(path, stat) if cache else None
    if facts is None:
        facts = gguf_facts(path)
        if cache and not facts.get("unreadable"):
            cache.put(path, stat, facts)
    if facts.get("error"):
        return Description("gguf", None, None, stat.st_size, facts["error"], True)
    arch, types = facts.get("architecture"), facts.get("types") or {}
    reason = gguf_problem(arch, set(types), facts.get("tokenizer"))
    return Description("gguf", arch, facts.get("quantization"), stat.st_size, reason, True)


def gguf_facts(path: Path) -> dict:
    """What the listing needs from a GGUF header, as plain JSON values (kept by HeaderCache)."""
    try:
        header = read_header(path)
    except OSError as exc:
        return {"error": f"cannot read the file ({exc.strerror or exc})", "unreadable": True}
    except GGUFHeaderError as exc:
        return {"error": f"not a readable GGUF file ({exc})"}
    tokenizer = header.metadata.get("tokenizer.ggml.model")
    return {
        "architecture": header.architecture,
        "quantization": _gguf_quantization(header),
        "types": dict(header.tensor_types),
        "tokenizer": tokenizer if isinstance(tokenizer, str) else None,
    }


def _gguf_quantization(header: GGUFHeader) -> str | None:
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


def describe_folder(path: Path, size: int | None = None, cache: HeaderCache | None = None) -> Description:
    """A folder with config.json: MLX-converted (a ``quantization`` entry, or safetensors saved by
    MLX) or a transformers safetensors folder. ``size``: when the caller knows it already."""
    size = folder_size(path) if size is None else size
    try:
        config = read_json(path / "config.json")
        names = os.listdir(path)
    except OSError as exc:
        return Description("safetensors", None, None, size, f"cannot read config.json ({exc.strerror or exc})", False)
    except ValueError as exc:
        return Description("safetensors", None, None, size, f"config.json is not valid JSON ({exc})", False)
    if not isinstance(config, dict):  # valid JSON, yet not the object of settings mlx-lm reads
        reason = f"config.json holds {_JSON_KINDS.get(type(config), 'a value')}, not a JSON object"
        return Description("safetensors", None, None, size, reason, False)
    arch = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    weights = sorted(n for n in names if n.startswith("model") and n.endswith(".safetensors"))
    facts = _weights_facts(path / weights[0], cache) if weights else {}
    quant = config.get("quantization")
    mlx = isinstance(quant, dict) or facts.get("format") == "mlx"
    quantization, quantized = _folder_quantization(quant, config.get("quantization_config"), facts.get("dtype"))
    reason = model_type_problem(config.get("model_type"))
    if not reason and not weights:
        torch = any(n.endswith((".bin", ".pth")) for n in names)
        reason = (
            "the weights are PyTorch files; mlx-lm reads only safetensors"
            if torch
            else "no model*.safetensors weights in the folder"
        )
    if not reason and weights:
        reason = missing_weights(path, weights)
    return Description("mlx" if mlx else "safetensors", arch, quantization, size, reason, quantized)


def missing_weights(path: Path, weights: list[str]) -> str:
    """Why the weights are incomplete (a download cut short, a copy half done): a file the
    safetensors index names, or a shard of a ``-0000k-of-0000n`` series, that is not in the
    folder; "" when every one is there. mlx-lm would load the rest and fail on the first
    missing tensor."""
    try:
        index = read_json(path / "model.safetensors.index.json")
    except (OSError, ValueError):
        index = None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    wanted = {f for f in weight_map.values() if isinstance(f, str)} if isinstance(weight_map, dict) else set()
    for name in weights:
        shard = _SHARD.search(name)
        if shard and int(shard.group(2)) <= _MAX_SHARDS:
            first, total = name[: shard.start()], shard.group(2)
            wanted |= {f"{first}-{i:05d}-of-{total}.safetensors" for i in range(1, int(total) + 1)}
    missing = sorted(f for f in wanted if not (path / f).is_file())
    if not missing:
        return ""
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    return f"the weights are incomplete: {len(missing)} of {len(wanted)} files missing ({missing[0]}{more})"


def _weights_facts(file: Path, cache: HeaderCache | None) -> dict:
    try:
        stat = file.stat()
    except OSError:
        return {}
    facts = cache.get(file, stat) if cache else None
    if facts is None:
        facts = safetensors_facts(file)
        if cache:
            cache.put(file, stat, facts)
    return facts


def _folder_quantization(quant: Any, quant_config: Any, dtype: str | None) -> tuple[str | None, bool]:
    if isinstance(quant, dict) and "bits" in quant:
        mode = quant.get("mode")
        text = f"{quant['bits']}-bit g{quant.get('group_size', 64)}"
        return (f"{text} {mode}" if mode and mode != "affine" else text), True
    if isinstance(quant_config, dict) and quant_config.get("quant_method"):
        return str(quant_config["quant_method"]), True
    return dtype, False


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
