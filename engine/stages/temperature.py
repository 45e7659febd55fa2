"""``temperature``: ``logits / T``, or dynamic temperature scaled by the entropy.

``T = 0`` is greedy: the draw takes the argmax of the distribution entering this
stage, and the stage divides by 1 so later stages stay informative (and a greedy row
ignores dynamic temperature).
"""

from __future__ import annotations

import mlx.core as mx

from engine.api.params import SamplingParams
from engine.specs.temperature import SPEC
from engine.stages.base import Inputs, Stage, count_and_total, log_softmax

# The dynamic temperature reaches 0 when the entropy is 0 and T <= range; llama.cpp then
# keeps only the argmax. Dividing by a floor instead gives the same point mass (tied
# maxima stay tied) without an infinity in the logits.
MIN_DYNAMIC_TEMPERATURE = 1e-6


def apply_temperature(
    logits: mx.array,
    temperature: mx.array,
    dynatemp_range: mx.array,
    dynatemp_exponent: mx.array,
) -> mx.array:
    """llama.cpp's ``temp_ext``: with ``range > 0`` the temperature is
    ``lo + (hi - lo) * (H / log n) ** exponent`` where ``lo = max(0, T - range)``,
    ``hi = T + range``, ``H`` the entropy and ``n`` the number of tokens still in the
    distribution; otherwise plain ``T``.

    logits: [B, V] float32; temperature, dynatemp_range, dynatemp_exponent: [B, 1].
    """
    plain = mx.where(temperature > 0, temperature, 1.0)
    logprobs = log_softmax(logits)
    lp = logprobs[:, None]
    count, total = count_and_total(logits, mx.exp(lp) * lp)
    entropy = -total
    normalized = entropy / mx.log(mx.maximum(count, 2.0))
    lo = mx.maximum(temperature - dynatemp_range, 0.0)
    hi = temperature + dynatemp_range
    dynamic = lo + (hi - lo) * mx.power(mx.maximum(normalized, 0.0), dynatemp_exponent)
    dynamic = mx.maximum(dynamic, MIN_DYNAMIC_TEMPERATURE)
    use_dynamic = (dynatemp_range > 0) & (temperature > 0) & (count > 1)
    return logits / mx.where(use_dynamic, dynamic, plain)


# A positive temperature below float32's range would divide by a denormal or by 0 (which
# the stage reads as greedy): held at this floor, it is the limit T -> 0, the argmax.
MIN_TEMPERATURE = 1e-6


def _columns(p: SamplingParams) -> dict[str, float]:
    return {
        "temperature": max(p.temperature, MIN_TEMPERATURE) if p.temperature > 0 else 0.0,
        "dynatemp_range": p.dynatemp_range,
        "dynatemp_exponent": p.dynatemp_exponent,
    }


def _apply(logits: mx.array, inputs: Inputs) -> mx.array:
    return apply_temperature(logits, inputs["temperature"], inputs["dynatemp_range"], inputs["dynatemp_exponent"])


def apply_plain_temperature(logits: mx.array, temperature: mx.array) -> mx.array:
    """``logits / T`` (``T = 0``: divided by 1): :func:`apply_temperature` where no row has a
    dynamic range, without computing the entropy it would not use."""
    return logits / mx.where(temperature > 0, temperature, 1.0)


def _plain(p: SamplingParams) -> bool:
    return p.dynatemp_range == 0.0 or p.temperature == 0.0


def _identity(p: SamplingParams) -> bool:
    # Greedy rows divide by 1 and ignore dynamic temperature: the stage only marks where
    # their argmax is taken.
    return p.temperature == 0.0 or (p.temperature == 1.0 and p.dynatemp_range == 0.0)


STAGE = Stage(
    SPEC,
    _apply,
    _columns,
    identity=_identity,
    forms=(("plain", _plain, lambda logits, inputs: apply_plain_temperature(logits, inputs["temperature"])),),
)
