"""The store's token steps: one :mod:`engine.api.codec` record per step (style ``STORE``:
values as computed, ``"v"`` on each), a reply's steps as one JSON array.

Every record version the store ever wrote reads back (:func:`engine.api.codec.decode_step`):
version 1 (the release before the stage chain, mapped onto a chain), version 2 (keyed by
stage name) and the current one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from engine.api.codec import STORE, decode_step, encode_step, record_version
from engine.api.events import TokenStep
from engine.api.params import SamplingParams


def step_to_dict(step: TokenStep, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """``params``: ``step.params.to_dict()`` when the caller has it already."""
    return encode_step(step, STORE, params if params is not None else step.params.to_dict())


def step_from_dict(data: Mapping[str, Any], request_id: int = -1, params: SamplingParams | None = None) -> TokenStep:
    """A record of any version. ``params``: the step's parameters when parsed already."""
    return decode_step(data, params, request_id)


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


def _records(text: str) -> list[Any]:
    """The JSON array, parsed by orjson (about three times the standard library's speed
    on a long reply); what orjson refuses and ``json`` takes — the NaN of records written
    before non-finite numbers were null, a lone surrogate escaped in a text — by ``json``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def steps_from_json(text: str) -> list[TokenStep]:
    # Likewise, validate each distinct parameter set once (version 1 derives its chain
    # from the raw parameters, so it reads its own).
    out, last_raw, last = [], None, None
    for data in _records(text):
        params = None
        if record_version(data) > 1:
            if data["params"] != last_raw:
                last_raw, last = data["params"], SamplingParams.from_dict(data["params"])
            params = last
        out.append(decode_step(data, params))
    return out
