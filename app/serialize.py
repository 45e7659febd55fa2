"""TokenStep <-> JSON, for the store and for exports. -inf is written as null."""

from __future__ import annotations

import json
import math
from typing import Any

from engine.events import Candidate, TokenStep
from engine.params import SamplingParams


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _back(value: float | None) -> float:
    return -math.inf if value is None else float(value)


def step_to_dict(step: TokenStep) -> dict[str, Any]:
    return {
        "index": step.index,
        "position": step.position,
        "token_id": step.token_id,
        "text": step.text,
        "piece": step.piece,
        "raw_logprob": _num(step.raw_logprob),
        "penalized_logprob": _num(step.penalized_logprob),
        "logprob": _num(step.logprob),
        "entropy_raw": step.entropy_raw,
        "entropy": step.entropy,
        "forced": step.forced,
        "params": step.params.to_dict(),
        "top": [
            [
                c.token_id,
                c.text,
                c.raw_logit,
                _num(c.raw_logprob),
                _num(c.penalized_logprob),
                _num(c.logprob),
                c.bias,
                c.penalty,
                c.count,
            ]
            for c in step.top
        ],
    }


def step_from_dict(data: dict[str, Any], request_id: int = -1) -> TokenStep:
    top = tuple(
        Candidate(
            token_id=int(t[0]),
            text=t[1],
            raw_logit=float(t[2]),
            raw_logprob=_back(t[3]),
            penalized_logprob=_back(t[4]),
            logprob=_back(t[5]),
            bias=float(t[6]),
            penalty=float(t[7]),
            count=int(t[8]),
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
        raw_logprob=_back(data["raw_logprob"]),
        penalized_logprob=_back(data["penalized_logprob"]),
        logprob=_back(data["logprob"]),
        entropy_raw=float(data["entropy_raw"]),
        entropy=float(data["entropy"]),
        top=top,
        params=SamplingParams.from_dict(data["params"]),
        forced=bool(data["forced"]),
    )


def steps_to_json(steps: list[TokenStep]) -> str:
    return json.dumps([step_to_dict(s) for s in steps])


def steps_from_json(text: str) -> list[TokenStep]:
    return [step_from_dict(d) for d in json.loads(text)]
