"""Every error in a set of values for SamplingParams, not only the first (no Qt).

``SamplingParams`` stops at its first bad field, which hid the others: a person who fixed
one then met the next. Here a refused field is left out (its default is always valid) and
the rest checked again, until they pass; then the ids of ``logit_bias`` are checked against
the loaded model's vocabulary (``SamplingParams.verify``), as the engine would at insert, and,
for a server, every field its kind cannot apply in a stage that runs
(``engine.remote.servers.refused_by``), as the remote backend would when the reply starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.api.params import SamplingParams, SamplingParamsError
from engine.remote.servers import refused_by


def check_values(
    values: Mapping[str, Any], vocab_size: int = 0, server: str = ""
) -> tuple[SamplingParams | None, list[SamplingParamsError]]:
    """The parameters when every value is valid, else None and every error found.

    ``vocab_size`` 0: not known (a remote server does not say), so ids are not checked.
    ``server``: the kind of the server in use (``ModelInfo.server``; "" for the local engine)."""
    errors: list[SamplingParamsError] = []
    remaining = dict(values)
    while True:
        try:
            params = SamplingParams(**remaining)
            break
        except SamplingParamsError as exc:
            errors.append(exc)
            if exc.field not in remaining:  # not one field's fault: nothing left to try
                return None, errors
            del remaining[exc.field]
    if vocab_size > 0:
        try:
            params.verify(vocab_size)
        except SamplingParamsError as exc:
            errors.append(exc)
    errors += refused_by(server, params)
    return (None if errors else params), errors


def error_message(errors: Sequence[SamplingParamsError]) -> str:
    """One line per error."""
    return "\n".join(str(exc) for exc in errors)
