"""The KV-cache quantization setting of a loaded model: mlx-lm's ``kv_bits``,
``kv_group_size`` and ``quantized_kv_start``, checked once and frozen.

No MLX here, so the app can read it; what it does to the caches is
:mod:`engine.caches.quantized` (docs/ENGINE.md, "Quantized KV cache").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.api.errors import EngineError

KV_BITS = (2, 3, 4, 5, 6, 8)
"""What ``mx.quantize`` packs a key or value into (bits per number)."""
KV_GROUP_SIZES = (32, 64, 128)
"""Numbers sharing one scale and bias, along the head dimension."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class KVQuantization:
    """``bits=None`` keeps the cache in the model's precision (off). Otherwise each cached
    key and value is quantized with ``mx.quantize(group_size, bits)`` once the request (or
    its batch) holds ``start`` tokens; ``start = 0`` quantizes from the first token.
    A bad value raises :class:`EngineError` naming it."""

    bits: int | None = None
    group_size: int = 64
    start: int = 0

    def __post_init__(self) -> None:
        listed = ", ".join(str(b) for b in KV_BITS)
        if self.bits is not None and (not _is_int(self.bits) or self.bits not in KV_BITS):
            raise EngineError(f"kv_bits must be one of {listed}, or None (off); got {self.bits!r}.")
        if not _is_int(self.group_size) or self.group_size not in KV_GROUP_SIZES:
            sizes = ", ".join(str(g) for g in KV_GROUP_SIZES)
            raise EngineError(f"kv_group_size must be one of {sizes}; got {self.group_size!r}.")
        if not _is_int(self.start) or self.start < 0:
            raise EngineError(f"quantized_kv_start must be an integer >= 0; got {self.start!r}.")

    @property
    def enabled(self) -> bool:
        return self.bits is not None

    def describe(self) -> str:
        """In words, e.g. ``8-bit (group 64)``, ``4-bit (group 32) from token 1000`` or ``off``."""
        if self.bits is None:
            return "off"
        text = f"{self.bits}-bit (group {self.group_size})"
        return text if self.start == 0 else f"{text} from token {self.start}"

    def to_dict(self) -> dict[str, Any]:
        """mlx-lm's names: ``kv_bits`` (None when off), ``kv_group_size``, ``quantized_kv_start``."""
        return {"kv_bits": self.bits, "kv_group_size": self.group_size, "quantized_kv_start": self.start}


KV_OFF = KVQuantization()


def check_kv(kv: KVQuantization | None) -> KVQuantization:
    """``None`` reads as off; anything but a :class:`KVQuantization` is refused."""
    if kv is None:
        return KV_OFF
    if not isinstance(kv, KVQuantization):
        raise EngineError(f"the KV-cache setting must be a KVQuantization, got {type(kv).__name__}.")
    return kv
