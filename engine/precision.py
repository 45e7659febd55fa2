"""The compute precision a model runs in, and the ``auto`` policy that chooses it.

A model computes in the dtype of its floating-point parameters: mlx-lm dequantizes
with the scales' dtype, so the embeddings, the residual stream, the norms and the KV
cache all follow it. Half precision loses the large activations of some families
(Gemma scales its embeddings by sqrt(hidden) and carries big residuals) and the
small logprobs of all: on real weights, float16 moved Gemma 3 270M's top-5 logprobs
by up to 2.3 nats and SmolLM2-135M's by up to 0.59 (``tests/test_fidelity_real.py``,
docs/ENGINE.md). The promise is that every logprob shown is within
``FIDELITY_TOLERANCE`` of a float32 run of the same weights, so ``auto`` computes in
float32, and in the stored half precision only where float32 would not fit in memory
(said in ``Precision.reason``; ``python -m engine fidelity`` measures what that costs).

Float32 costs little for quantized weights: the packed integers stay as they are, and
only the scales, biases, norms and activations widen (on a 4-bit model with groups of
64, 11 % more bytes per weight). On the CPU it is faster (bench figure 16): MLX has
no half-precision matrix kernels there.

Casting is lossless both ways for stored float16/bfloat16 values, so a model can be
put in float32 for a check and back (``engine.fidelity``).
"""

from __future__ import annotations

# MLX is imported inside the functions: the app reads PRECISIONS without loading MLX.
import os
from dataclasses import dataclass
from typing import Any

from engine.errors import EngineError

AUTO = "auto"
PRECISIONS = (AUTO, "float32", "float16", "bfloat16")
FIDELITY_TOLERANCE = 0.03
"""nats: the largest difference allowed between a top-5 logprob and float32's."""
MEMORY_SHARE = 0.75  # of the machine's memory the float32 weights may take


@dataclass(frozen=True, slots=True)
class Precision:
    """What a model runs in and why."""

    choice: str
    """What was asked: ``auto``, ``float32``, ``float16`` or ``bfloat16``."""
    dtype: str
    """What it computes in: ``float32``, ``float16`` or ``bfloat16``."""
    stored: str
    """The float type its weights were stored in."""
    reason: str
    """One sentence a person can read: why this dtype."""


def check_choice(choice: str) -> str:
    """``choice`` if it is a precision, else a clear error (before anything is loaded)."""
    if choice not in PRECISIONS:
        raise EngineError(f"unknown precision {choice!r} (choose one of {', '.join(PRECISIONS)}).")
    return choice


def float_bytes(model: Any) -> dict[str, int]:
    """Bytes of the model's floating-point parameters, by dtype name."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

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
    import mlx.core as mx

    model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())


def _name(dtype: Any) -> str:
    return str(dtype).replace("mlx.core.", "")


def total_memory() -> int:
    """What the device can hold: its recommended working set on a GPU, else the RAM."""
    import mlx.core as mx

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
    import mlx.core as mx
    from mlx.utils import tree_flatten

    total = sum(v.nbytes for _, v in tree_flatten(model.parameters()) if isinstance(v, mx.array))
    return total - sum(float_bytes(model).values())
