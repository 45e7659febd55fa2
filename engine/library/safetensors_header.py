"""What a safetensors file's header says about its weights, without parsing all of it.

The header is 8 bytes of length, then JSON naming every tensor's dtype and, under
``__metadata__``, who wrote it (``{"format": "mlx"}`` from MLX, ``"pt"`` from transformers). A 4-bit
7B model's header is ~100 KB of JSON; the listing only counts the dtypes and reads the format,
which two regular expressions do several times faster than ``json.loads`` (the listing reads
hundreds of these).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

_DTYPE = re.compile(rb'"dtype"\s*:\s*"(\w+)"')
_FORMAT = re.compile(rb'"__metadata__"\s*:\s*\{[^}]*?"format"\s*:\s*"(\w*)"')
_NAMES = {"BF16": "bf16", "F16": "f16", "F32": "f32", "F8_E4M3": "f8", "F8_E5M2": "f8"}
MAX_HEADER = 1 << 27


def safetensors_facts(file: Path) -> dict:
    """``{"format": the writer's format or None, "dtype": the commonest float dtype ("bf16",
    "f16", "f32", "f8") or None}``; both None when the header cannot be read."""
    try:
        with open(file, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = f.read(n) if 0 < n < MAX_HEADER else b""
    except OSError:
        header = b""
    counts = Counter(_NAMES[d] for d in (m.decode() for m in _DTYPE.findall(header)) if d in _NAMES)
    found = _FORMAT.search(header)
    return {
        "format": found.group(1).decode() if found else None,
        "dtype": counts.most_common(1)[0][0] if counts else None,
    }
