"""``penalties``: repetition (CTRL), then OpenAI presence and frequency, over the window."""

from __future__ import annotations

import mlx.core as mx

from engine.params import SamplingParams
from engine.stages.base import Inputs, Stage


def apply_penalties(
    logits: mx.array,
    counts: mx.array,
    repetition: mx.array,
    presence: mx.array,
    frequency: mx.array,
) -> mx.array:
    """Repetition (Keskar et al. 2019) divides positive and multiplies negative logits of
    seen tokens; presence subtracts ``p`` once, frequency ``f * count`` (llama.cpp's
    ``penalties`` sampler, Hugging Face's RepetitionPenaltyLogitsProcessor).

    logits: [B, V] float32; counts: [B, V] int32 (tokens in the window);
    repetition, presence, frequency: [B, 1] float32 (1, 0, 0 = off).
    """
    seen = counts > 0
    scaled = mx.where(logits > 0, logits / repetition, logits * repetition)
    logits = mx.where(seen, scaled, logits)
    return logits - presence * seen.astype(mx.float32) - frequency * counts.astype(mx.float32)


def _active(p: SamplingParams) -> bool:
    return p.has_penalties


# A repetition penalty below float32's range would divide positive logits by 0 (inf):
# held at this floor it is already the limit, seen tokens pushed to the extremes.
MIN_REPETITION_PENALTY = 1e-6


def _columns(p: SamplingParams) -> dict[str, float]:
    return {
        "repetition_penalty": max(p.repetition_penalty, MIN_REPETITION_PENALTY),
        "presence_penalty": p.presence_penalty,
        "frequency_penalty": p.frequency_penalty,
    }


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_penalties(
        logits,
        inputs["counts"],
        inputs["repetition_penalty"],
        inputs["presence_penalty"],
        inputs["frequency_penalty"],
    )


STAGE = Stage("penalties", _apply, _active, _columns, state=("counts",))
