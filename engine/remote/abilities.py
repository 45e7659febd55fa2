"""What a server kind can and cannot do, in words, from its :class:`ServerKind` (the one
copy): shown by the app's Connect dialog before the first reply."""

from __future__ import annotations

from engine.remote.kind import ASSISTANT_PREFILL, CONTINUE_FINAL_MESSAGE, ServerKind
from engine.remote.pieces import FIRST_PIECE, PIECE
from engine.remote.servers import KINDS

_STAGES = {
    "raw": "the model's raw distribution",
    "penalties": "after its logit bias and penalties, before temperature",
    "final": "after its whole sampling chain",
    "sglang": "after its penalties and temperature",
}
_COMMON = "temperature, top-p, seed, stop strings, presence/frequency penalties, logit bias"


def abilities(kind_name: str) -> list[str]:
    """One sentence each: its logprobs' stage and count, how a reply arrives, whether it
    continues a reply, the sampling settings it takes. Empty for an unknown kind."""
    kind = KINDS.get(kind_name)
    if kind is None:
        return []
    return [
        f"Logprobs: {_STAGES[kind.default_stage]}; at most {kind.max_top_logprobs} alternatives a token.",
        _arrival(kind),
        _continues(kind),
        f"Takes {_COMMON}{_extra(kind)}; other stages are refused before sending.",
    ]


def _arrival(kind: ServerKind) -> str:
    if kind.streams_logprobs:
        return "Replies stream token by token with their logprobs."
    return (
        f"Its stream carries no logprobs: a reply is asked for in pieces ({FIRST_PIECE} tokens, then {PIECE}) "
        "and shows piece by piece; it is asked for whole when seeded and sampled, with penalties, or when "
        "the model's chat template cannot be read here."
    )


def _continues(kind: ServerKind) -> str:
    if kind.continue_chat in (CONTINUE_FINAL_MESSAGE, ASSISTANT_PREFILL):
        return "It continues a reply (branches and live changes)."
    return (
        "It cannot continue a reply in a chat: branches, live changes and pieces go through /v1/completions "
        "with the model's chat template rendered here (its folder, or the chat template field)."
    )


def _extra(kind: ServerKind) -> str:
    extra = sorted(kind.extra_fields - {"penalty_window"})
    return ", and " + ", ".join(extra) if extra else " only"
