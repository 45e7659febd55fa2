"""The compute precision a model runs in, and the ``auto`` policy that chooses it.

A model computes in the dtype of its floating-point parameters: mlx-lm dequantizes
with the scales' dtype, so the embeddings, the residual stream, the norms and the KV
cache all follow it. Half precision loses the large activations of some families
(Gemma scales its embeddings by sqrt(hidden) and carries big residuals) and the
small logprobs of all: on real weights, float16 moved Gemma 3 270M's top-5 logprobs
by up to 2.3 nats and SmolLM2-135M's by up to 0.59 (``tests/integration/test_fidelity_real.py``,
docs/ENGINE.md). The promise is that every logprob shown is within
``FIDELITY_TOLERANCE`` of a float32 run of the same weights, so ``auto`` computes in
float32, and in the stored half precision only where float32 would not fit in memory
(said in ``Precision.reason``; ``python -m engine fidelity`` measures what that costs).

Float32 costs little for quantized weights: the packed integers stay as they are, and
only the scales, biases, norms and activations widen (on a 4-bit model with groups of
64, 11 % more bytes per weight). On the CPU it is faster (bench figure 16): MLX has
no half-precision matrix kernels there.

Casting is lossless both ways for stored float16/bfloat16 values, so a model can be
put in float32 for a check and back (``engine.analysis.fidelity``).

This module is the plain part the app reads (the choices, the tolerance, ``Precision``);
measuring and casting a loaded model is ``engine.models.precision``.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.api.errors import EngineError

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
