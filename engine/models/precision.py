"""Measuring and casting a loaded model's precision (``engine.api.precision`` has the choices,
the ``auto`` policy's words and ``Precision``): the bytes of its float parameters by dtype,
the dtype ``auto`` chooses for it, and the cast.
"""

from __future__ import annotations

import os
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from engine.api.precision import AUTO, MEMORY_SHARE, Precision, check_choice


def float_bytes(model: Any) -> dict[str, int]:
    """Bytes of the model's floating-point parameters, by dtype name."""
    sizes: dict[str, int] = {}
    for _, value in tree_flatten(model.parameters()):
        if isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating):
            name = _name(value.dtype)
            sizes[name] = sizes.get(name, 0) + value.nbytes
    return sizes


def stored_dtype(model: Any) -> str:
    """The float type most of the model's floating-point bytes are stored in."""
    sizes = float_bytes(model)
    return max(sizes, key=sizes.__getitem__) if sizes else "float32"


def choose(choice: str, model: Any) -> Precision:
    """The precision ``model`` (an mlx-lm model) should run in."""
    check_choice(choice)
    stored = stored_dtype(model)
    if choice != AUTO:
        return Precision(choice, choice, stored, "chosen by the user")
    sizes = float_bytes(model)
    extra = sum(n for name, n in sizes.items() if name != "float32")
    if not extra:
        return Precision(choice, "float32", stored, "the weights are stored in float32")
    total = total_memory()
    if total and other_bytes(model) + 2 * extra > MEMORY_SHARE * total:
        return Precision(choice, stored, stored, f"float32 would not fit in memory: {stored} may be off, check it")
    return Precision(choice, "float32", stored, "float32 keeps every logprob within 0.03 nats of the model's")


def needs_cast(model: Any, chosen: Precision) -> bool:
    """float32: any parameter in another float type. A half precision: only when it is not
    the stored one (a float16 file's float32 norms stay, as mlx-lm runs the folder)."""
    if chosen.dtype == "float32":
        return set(float_bytes(model)) - {"float32"} != set()
    return chosen.dtype != chosen.stored


def apply(model: Any, dtype: str) -> None:
    """Cast every floating-point parameter (weights, quantization scales and biases, norms)."""
    model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())


def _name(dtype: Any) -> str:
    return str(dtype).replace("mlx.core.", "")


def total_memory() -> int:
    """What the device can hold: its recommended working set on a GPU, else the RAM."""
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    for key in ("max_recommended_working_set_size", "memory_size"):
        if isinstance(info.get(key), int) and info[key] > 0:
            return int(info[key])
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def other_bytes(model: Any) -> int:
    """Bytes of the non-float parameters (packed quantized weights): they stay as they are."""
    total = sum(v.nbytes for _, v in tree_flatten(model.parameters()) if isinstance(v, mx.array))
    return total - sum(float_bytes(model).values())
