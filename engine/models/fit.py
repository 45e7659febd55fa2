"""Whether a second model fits beside the one running: its size estimated from its files
before anything is loaded, so a comparison that would not fit is refused with the numbers.

The estimate reads only file sizes and ``config.json``: a quantized model (a GGUF file, or
a folder whose config names a quantization) takes about its size on disk (its scales are
cast to float32: a tenth more); unquantized half-precision weights (the safetensors
header says) double when the model computes in float32 (``auto``'s choice wherever it
fits).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.api.errors import EngineError
from engine.api.precision import MEMORY_SHARE
from engine.models.precision import float_bytes, other_bytes, total_memory

GIB = float(1 << 30)


def loaded_bytes(model: Any) -> int:
    """Bytes of every parameter of a loaded model."""
    return sum(float_bytes(model).values()) + other_bytes(model)


def estimate_bytes(source: str, precision: str) -> int | None:
    """About what ``source`` takes once loaded in ``precision``; None when its files are not
    on disk (a repo id not yet downloaded) or cannot be read."""
    from engine.models.load import DEFAULT_MODEL, default_model_path

    path = default_model_path() if source == DEFAULT_MODEL else Path(source).expanduser()
    try:
        if path.is_file():
            return int(path.stat().st_size * 1.1)
        if not path.is_dir():
            return None
        disk = sum(p.stat().st_size for p in path.glob("*.safetensors"))
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if config.get("quantization") or config.get("quantization_config"):
        return int(disk * 1.1)
    widen = precision in ("auto", "float32") and _stored_half(path)
    return disk * 2 if widen else disk


def _stored_half(folder: Path) -> bool:
    """Whether the weights are stored in half precision, from a safetensors header (8 bytes
    of length, then JSON naming each tensor's dtype)."""
    for file in sorted(folder.glob("*.safetensors"))[:1]:
        try:
            with open(file, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                if not 0 < n < 1 << 26:
                    return True
                header = json.loads(f.read(n))
        except (OSError, ValueError):
            return True
        dtypes = [v.get("dtype") for v in header.values() if isinstance(v, dict)]
        return dtypes.count("F32") < len(dtypes) / 2
    return True


def check_fits_beside(running: int, source: str, precision: str) -> None:
    """Refuse to load ``source`` beside ``running`` bytes already in use when both would take
    more than the share of the device's memory a model may use."""
    need, total = estimate_bytes(source, precision), total_memory()
    if need is None or not total or running + need <= MEMORY_SHARE * total:
        return
    raise EngineError(
        f"{Path(source).name or source} needs about {need / GIB:.1f} GiB beside the {running / GIB:.1f} GiB "
        f"in use, more than {MEMORY_SHARE:.0%} of this machine's {total / GIB:.1f} GiB: "
        "compare through a base file (python -m engine kld --save-base) instead."
    )
