"""The checks every sampling parameter goes through, and the error they raise.

Kept apart from :mod:`engine.api.params` so that stage specs (``engine/specs/*.py``),
which :mod:`engine.api.params` collects, can validate their own fields without a cycle.
"""

from __future__ import annotations

import math
from typing import Any


class SamplingParamsError(ValueError):
    """A sampling parameter is out of range. ``field`` names it for the UI."""

    def __init__(self, field_name: str, value: Any, message: str) -> None:
        super().__init__(message)
        self.field = field_name
        self.value = value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_float(name: str, value: Any, lo: float, hi: float, lo_open: bool = False) -> float:
    if not is_number(value) or not math.isfinite(value):
        raise SamplingParamsError(name, value, f"{name} must be a finite number, got {value!r}.")
    ok = (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise SamplingParamsError(name, value, f"{name} must be in {bracket}{lo}, {hi}], got {value}.")
    return float(value)


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SamplingParamsError(name, value, f"{name} must be an integer, got {value!r}.")
    if not lo <= value <= hi:
        raise SamplingParamsError(name, value, f"{name} must be in [{lo}, {hi}], got {value}.")
    return value
