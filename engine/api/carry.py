"""The carried stage state of a stored reply, rebuilt from its recorded tokens.

Most stage state follows from the token history (penalty counts, DRY's repeats), which a
continuation prefills anyway. State that does not (mirostat's μ depends on every earlier
distribution) is folded from each recorded token's logprob after that stage by the
stage's ``StageSpec.replay``, so a branch or "compare from here" of a reply the engine no
longer holds (a saved one, or any reply the app continues) starts where the reply was.
Imports neither MLX nor Qt: the app calls it on the steps it stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from engine.api.errors import EngineError
from engine.api.events import TokenStep
from engine.specs.registry import SPECS

Carry = dict[str, Any]
"""Carried state by stage name (a request's ``carry_in``)."""


def carry_from_steps(steps: Sequence[TokenStep]) -> Carry:
    """The carried state before the token after ``steps`` (a reply's first tokens, in order)."""
    carry: Carry = {}
    for spec in SPECS.values():
        if spec.replay is None:
            continue
        state = None
        for step in steps:
            # A stage off for a token starts afresh when it joins again (as ``set_params``).
            state = spec.replay(state, step.params, step.logprob_at(spec.name)) if spec.active(step.params) else None
        if state is not None:
            carry[spec.name] = state
    return carry


def check_carry(carry: Mapping[str, Any] | None) -> Carry | None:
    """``carry`` as a request takes it: stage names with a ``replay``, finite numbers."""
    if carry is None:
        return None
    if not isinstance(carry, Mapping):
        raise EngineError(f"carry must be a mapping of stage name to state, got {type(carry).__name__}.")
    out: Carry = {}
    for name, value in carry.items():
        spec = SPECS.get(name)
        if spec is None or spec.replay is None:
            raise EngineError(f"carry: {name!r} is not a stage with carried state.")
        if spec.check_carry is not None:
            try:
                out[name] = spec.check_carry(value)
            except ValueError as exc:
                raise EngineError(f"carry: {exc}.") from None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise EngineError(f"carry: {name} must be a finite number, got {value!r}.")
        out[name] = float(value)
    return out
