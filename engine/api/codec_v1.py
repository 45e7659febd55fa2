"""Token records of version 1: what the store saved before the stage chain.

Version 1 kept three fixed distributions (``raw``, ``penalized``, ``final``) and each
candidate as a positional list ``[token_id, text, raw_logit, raw_logprob,
penalized_logprob, final_logprob, bias, penalty, count]``. :func:`decode_v1` maps such a
record onto a chain (:func:`chain_from_v1`); :mod:`engine.api.codec` calls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from engine.api.events import Candidate, TokenStep
from engine.api.params import SamplingParams


def chain_from_v1(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The chain a version-1 step stands for, from the parameters saved with it.

    Version 1 kept three distributions. ``penalized`` was the logits after the bias
    and the penalties: it is the ``penalties`` stage when a penalty was active (the
    bias, which runs first, is folded into it), ``bias`` when only a logit bias was,
    and absent when neither was. ``final`` came after temperature, top-k, top-p and
    min-p, in that fixed order: it is named by the last of those that was active, or
    ``temperature`` when none was (the old ``final`` was always computed).
    """
    chain = ["raw"]
    penalties = (
        params.get("repetition_penalty", 1.0) != 1.0
        or params.get("presence_penalty", 0.0) != 0.0
        or params.get("frequency_penalty", 0.0) != 0.0
    )
    if penalties:
        chain.append("penalties")
    elif params.get("logit_bias"):
        chain.append("bias")
    active = [
        name
        for name, on in (
            ("temperature", params.get("temperature", 0.0) != 1.0),
            ("top_k", params.get("top_k", 0) > 0),
            ("top_p", params.get("top_p", 1.0) < 1.0),
            ("min_p", params.get("min_p", 0.0) > 0.0),
        )
        if on
    ]
    chain.append(active[-1] if active else "temperature")
    return tuple(chain)


def _removed_by(chain: tuple[str, ...], logprobs: tuple[float, ...]) -> str | None:
    """The first stage after ``raw`` under which the token's logprob is -inf."""
    for stage, value in zip(chain[1:], logprobs[1:], strict=True):
        if value == -math.inf:
            return stage
    return None


def _logprob(value: float | None) -> float:
    return -math.inf if value is None else float(value)


def _candidate(row: list[Any], chain: tuple[str, ...], middle: bool) -> Candidate:
    token_id, text, raw_logit, raw_lp, penalized_lp, final_lp, bias, penalty, count = row
    kept = (raw_lp, penalized_lp, final_lp) if middle else (raw_lp, final_lp)
    logprobs = tuple(_logprob(v) for v in kept)
    return Candidate(
        token_id=int(token_id),
        text=text,
        raw_logit=float(raw_logit),
        logprobs=logprobs,
        removed_by=_removed_by(chain, logprobs),
        bias=float(bias),
        penalty=float(penalty),
        count=int(count),
    )


def decode_v1(data: Mapping[str, Any], request_id: int = -1) -> TokenStep:
    chain = chain_from_v1(data["params"])
    middle = len(chain) == 3  # a penalized distribution between raw and final
    kept = (data["raw_logprob"], data["penalized_logprob"], data["logprob"])
    logprobs = tuple(_logprob(v) for v in (kept if middle else (kept[0], kept[2])))
    # Version 1 had the entropy of raw and of final only, and no survivor counts.
    entropies = (float(data["entropy_raw"]), *([None] if middle else []), float(data["entropy"]))
    return TokenStep(
        request_id=request_id,
        index=int(data["index"]),
        position=int(data["position"]),
        token_id=int(data["token_id"]),
        text=data["text"],
        piece=data["piece"],
        chain=chain,
        logprobs=logprobs,
        entropies=entropies,
        survivors=(None,) * len(chain),  # version 1 never kept them
        top=tuple(_candidate(row, chain, middle) for row in data["top"]),
        params=SamplingParams.from_dict(data["params"]),
        forced=bool(data["forced"]),
    )
