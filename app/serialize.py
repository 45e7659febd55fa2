"""TokenStep <-> JSON, for the store and for exports.

Format 2 (``"v": 2``) is keyed by stage name: ``chain`` gives the order, and the
chosen token's ``logprobs``, the ``entropies``, the ``survivors`` and every
candidate's ``logprobs`` are ``{stage: value}`` maps, so a stage added later never
shifts a column. JSON has no infinities or NaN: a removed token's logprob (-inf)
and an unknown entropy (NaN) are both written as null and told apart by the field.

Format 1 (no ``"v"``) is what the release before the stage chain saved: three fixed
distributions (``raw``, ``penalized``, ``final``) and candidates as positional lists.
:func:`step_from_dict` reads it too, mapped onto a chain by :func:`chain_from_v1`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from engine.events import Candidate, TokenStep
from engine.params import SamplingParams

FORMAT = 2
UNKNOWN_SURVIVORS = -1
"""A survivor count the saved data does not have (format 1 never recorded one)."""


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _logprob(value: float | None) -> float:
    return -math.inf if value is None else float(value)


def _entropy(value: float | None) -> float:
    return math.nan if value is None else float(value)


def step_to_dict(step: TokenStep, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """``params``: ``step.params.to_dict()`` when the caller has it already."""
    chain = step.chain
    return {
        "v": FORMAT,
        "index": step.index,
        "position": step.position,
        "token_id": step.token_id,
        "text": step.text,
        "piece": step.piece,
        "chain": list(chain),
        "logprobs": {s: _num(v) for s, v in zip(chain, step.logprobs, strict=True)},
        "entropies": {s: _num(v) for s, v in zip(chain, step.entropies, strict=True)},
        "survivors": dict(zip(chain, step.survivors, strict=True)),
        "forced": step.forced,
        "params": params if params is not None else step.params.to_dict(),
        "top": [
            {
                "token_id": c.token_id,
                "text": c.text,
                "raw_logit": c.raw_logit,
                "logprobs": {s: _num(v) for s, v in zip(chain, c.logprobs, strict=True)},
                "removed_by": c.removed_by,
                "bias": c.bias,
                "penalty": c.penalty,
                "count": c.count,
            }
            for c in step.top
        ],
    }


def step_from_dict(data: Mapping[str, Any], request_id: int = -1, params: SamplingParams | None = None) -> TokenStep:
    """Either format; format 1 is mapped onto a chain (see :func:`chain_from_v1`).
    ``params``: the step's parameters when the caller has parsed them already."""
    version = data.get("v", 1)
    if version == 1:
        return _step_from_v1(data, request_id)
    if version != FORMAT:
        raise ValueError(f"token step format {version} is newer than this app reads ({FORMAT}).")
    chain = tuple(data["chain"])
    top = tuple(
        Candidate(
            token_id=int(t["token_id"]),
            text=t["text"],
            raw_logit=float(t["raw_logit"]),
            logprobs=tuple(_logprob(t["logprobs"].get(s)) for s in chain),
            removed_by=t["removed_by"],
            bias=float(t["bias"]),
            penalty=float(t["penalty"]),
            count=int(t["count"]),
        )
        for t in data["top"]
    )
    return TokenStep(
        request_id=request_id,
        index=int(data["index"]),
        position=int(data["position"]),
        token_id=int(data["token_id"]),
        text=data["text"],
        piece=data["piece"],
        chain=chain,
        logprobs=tuple(_logprob(data["logprobs"].get(s)) for s in chain),
        entropies=tuple(_entropy(data["entropies"].get(s)) for s in chain),
        survivors=tuple(int(data["survivors"].get(s, UNKNOWN_SURVIVORS)) for s in chain),
        top=top,
        params=params if params is not None else SamplingParams.from_dict(data["params"]),
        forced=bool(data["forced"]),
    )


# Format 1 -----------------------------------------------------------------------------


def chain_from_v1(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The chain a format-1 step stands for, from the parameters saved with it.

    Format 1 kept three distributions. ``penalized`` was the logits after the bias
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


def _step_from_v1(data: Mapping[str, Any], request_id: int) -> TokenStep:
    chain = chain_from_v1(data["params"])
    middle = len(chain) == 3  # a penalized distribution between raw and final

    def values(raw: float | None, penalized: float | None, final: float | None) -> tuple[float, ...]:
        kept = (raw, penalized, final) if middle else (raw, final)
        return tuple(_logprob(v) for v in kept)

    top = []
    for t in data["top"]:
        token_id, text, raw_logit, raw_lp, penalized_lp, final_lp, bias, penalty, count = t
        logprobs = values(raw_lp, penalized_lp, final_lp)
        top.append(
            Candidate(
                token_id=int(token_id),
                text=text,
                raw_logit=float(raw_logit),
                logprobs=logprobs,
                removed_by=_removed_by(chain, logprobs),
                bias=float(bias),
                penalty=float(penalty),
                count=int(count),
            )
        )
    # Format 1 had the entropy of raw and of final only, and no survivor counts.
    entropies = (float(data["entropy_raw"]), *([math.nan] if middle else []), float(data["entropy"]))
    return TokenStep(
        request_id=request_id,
        index=int(data["index"]),
        position=int(data["position"]),
        token_id=int(data["token_id"]),
        text=data["text"],
        piece=data["piece"],
        chain=chain,
        logprobs=values(data["raw_logprob"], data["penalized_logprob"], data["logprob"]),
        entropies=entropies,
        survivors=(UNKNOWN_SURVIVORS,) * len(chain),
        top=tuple(top),
        params=SamplingParams.from_dict(data["params"]),
        forced=bool(data["forced"]),
    )


def steps_to_json(steps: list[TokenStep], pause: Callable[[], None] | None = None) -> str:
    """The steps as a JSON array. ``pause`` is called after each step: on a background
    thread, ``time.sleep(0)`` there hands the interpreter back to the GUI thread at once
    rather than after Python's 5 ms switch interval."""
    # A reply's steps share their parameters but for the few places they changed:
    # convert each distinct SamplingParams once (asdict is most of the cost of a step).
    out, last, last_dict = [], None, None
    for step in steps:
        if last is None or (step.params is not last and step.params != last):
            last_dict = step.params.to_dict()
        last = step.params
        out.append(json.dumps(step_to_dict(step, last_dict)))
        if pause is not None:
            pause()
    return "[" + ", ".join(out) + "]"


def steps_from_json(text: str) -> list[TokenStep]:
    # Likewise, validate each distinct parameter set once.
    out, last_raw, last = [], None, None
    for data in json.loads(text):
        if data.get("v", 1) == FORMAT and data["params"] != last_raw:
            last_raw, last = data["params"], SamplingParams.from_dict(data["params"])
        out.append(step_from_dict(data, params=last if data.get("v", 1) == FORMAT else None))
    return out
