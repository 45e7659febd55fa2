"""``bias`` as the app, the CLI and the docs see it (its kernel: :mod:`engine.stages.bias`).

Its one parameter, ``logit_bias``, is a mapping edited on its own, not a field here.
"""

from __future__ import annotations

from engine.specs.spec import StageSpec, Values


def _neutral(v: Values) -> bool:
    return not v.logit_bias


SPEC = StageSpec(
    name="bias",
    summary="Adds logit_bias to the logits of the given tokens; always first.",
    order=0,
    fields=(),
    neutral=_neutral,
    definition="`l + logit_bias[t]`",
    off="empty",
    reference="OpenAI `logit_bias`",
    reorderable=False,
)
