"""Which sampling fields each server kind takes, the request fields sent for them, and
the ones it must refuse (docs/REMOTE.md, "Sampling fields each server takes").

A field counts only where its stage runs (``row_chain``): a stage switched off in the
chain editor (left out of ``samplers``, its values kept) or at its off value is neither
sent nor refused, as the local chain leaves it out. Imports no MLX and no network, so the
app checks a server's settings with it before anything is added to the conversation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.api.params import DEFAULT_DRY_SEQUENCE_BREAKERS, SamplingParams, SamplingParamsError
from engine.remote.structured import grammar_fields, grammar_refusals
from engine.specs import SPECS, row_chain

if TYPE_CHECKING:
    from engine.remote.kind import ServerKind

# Fields a kind may not take, each the switch of its stage (``ServerKind.extra_fields``).
_CHECKED = (
    "top_k",
    "min_p",
    "typical_p",
    "repetition_penalty",
    "top_n_sigma",
    "xtc_probability",
    "dry_multiplier",
    "dynatemp_range",
)
_STAGE_OF = {f.name: s.name for s in SPECS.values() for f in s.fields}
_OFF = SamplingParams()
MIROSTAT_CHAIN = " with mirostat_v2 (its mirostat chain is logit bias, temperature, mirostat)"


def refusals(kind: ServerKind, params: SamplingParams) -> list[SamplingParamsError]:
    """Every field set away from its off value, in a stage that runs, that ``kind`` cannot
    apply: one error each, its ``field`` naming what to outline (the settings per phase
    first: no server can apply them)."""
    return (
        reasoning_refusals(kind, params)
        + grammar_refusals(kind, params)
        + [
            SamplingParamsError(
                field,
                getattr(params, field, None),
                f"{kind.title} does not take {what}: set it to its off value or switch {stage} off in the chain.",
            )
            for field, what, stage in _refused(kind, params)
        ]
    )


def reasoning_refusals(kind: ServerKind, params: SamplingParams) -> list[SamplingParamsError]:
    """A reasoning model's settings per phase, which a server cannot apply: it samples a
    reply with one setting from its first token to its last, and chooses every token."""
    out = []
    if params.think_variant is not None:
        out.append(
            SamplingParamsError(
                "think_variant",
                params.think_variant,
                f"{kind.title} samples a whole reply with one setting: other settings from the end "
                "of the thinking would need the reply stopped there and continued as a second "
                "request, which is not the same sampling (the server's sampler state and cache start "
                "again). Use them with a local model.",
            )
        )
    if params.thinking_budget is not None:
        out.append(
            SamplingParamsError(
                "thinking_budget",
                params.thinking_budget,
                f"{kind.title} chooses every token of its reply: the end-of-thinking marker cannot be "
                "forced into it from here (a server's own thinking budget is set on the server). "
                "Use the budget with a local model.",
            )
        )
    return out


def unsupported(kind: ServerKind, params: SamplingParams) -> list[str]:
    """What :func:`refusals` refuses, in words for one message (``top_k``, ...)."""
    ahead = reasoning_refusals(kind, params) + grammar_refusals(kind, params)
    return [e.field for e in ahead] + [what for _, what, _ in _refused(kind, params)]


def _refused(kind: ServerKind, params: SamplingParams) -> list[tuple[str, str, str]]:
    """(field to outline, what is refused, its stage) for each refusal."""
    chain = row_chain(params)
    found = [
        (name, name, _STAGE_OF[name])
        for name in _CHECKED
        if _STAGE_OF[name] in chain and getattr(params, name) != getattr(_OFF, name) and name not in kind.extra_fields
    ]
    return found + _mirostat_refused(kind, params, chain)


def _mirostat_refused(kind: ServerKind, params: SamplingParams, chain: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """llama.cpp's server is the only one with Mirostat 2.0 (``"mirostat": 2``), and its
    mirostat chain is logit bias, plain temperature, mirostat: every other stage is
    dropped there, so it is refused rather than silently not applied."""
    if "mirostat_v2" not in chain:
        return []
    if "mirostat_tau" not in kind.extra_fields:
        return [("mirostat_tau", "mirostat_v2 (in samplers)", "mirostat_v2")]
    others = [s for s in chain if s not in ("bias", "temperature", "mirostat_v2", "grammar")]
    found = [(_field_at_fault(s, params), s + MIROSTAT_CHAIN, s) for s in others]
    if "temperature" in chain and chain.index("temperature") > chain.index("mirostat_v2"):
        found.append(("samplers", "temperature after mirostat_v2" + MIROSTAT_CHAIN, "mirostat_v2"))
    if params.dynatemp_range:
        found.append(("dynatemp_range", "dynatemp_range" + MIROSTAT_CHAIN, "mirostat_v2"))
    return found


def _field_at_fault(stage: str, params: SamplingParams) -> str:
    """The first of ``stage``'s fields away from its off value (what the panel outlines)."""
    fields = [f.name for f in SPECS[stage].fields]
    return next((n for n in fields if getattr(params, n) != getattr(_OFF, n)), fields[0])


_LLAMA_CPP_SAMPLER_NAMES = {"typical_p": "typ_p"}


def sampling_fields(kind: ServerKind, params: SamplingParams, top_logprobs: int, context: int = 0) -> dict[str, Any]:
    """The request fields for ``params`` (without prompt, stream or logprobs fields).
    Fields of stages that do not run are left out, so neither a server's own defaults nor
    a switched-off stage's kept values creep in; with ``temperature`` switched off the
    draw is plain softmax, temperature 1. ``context``: the server's context per request
    (llama.cpp's ``/props``; 0 when unknown), what a window of "all" is sent as."""
    runs = set(row_chain(params))
    temperature = params.temperature if "temperature" in runs else 1.0
    body: dict[str, Any] = {"temperature": temperature, "max_tokens": params.max_tokens}
    if "top_p" in runs:
        body["top_p"] = params.top_p
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop:
        body["stop"] = list(params.stop)
    if params.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in params.logit_bias.items()}
    penalties = "penalties" in runs
    if penalties and params.presence_penalty:
        body["presence_penalty"] = params.presence_penalty
    if penalties and params.frequency_penalty:
        body["frequency_penalty"] = params.frequency_penalty
    extra = kind.extra_fields
    if "top_k" in runs and "top_k" in extra:
        body["top_k"] = params.top_k
    if "min_p" in runs and "min_p" in extra:
        body["min_p"] = params.min_p
    if penalties and params.repetition_penalty != 1.0 and "repetition_penalty" in extra:
        body["repeat_penalty" if kind.name in ("llama.cpp", "lmstudio") else "repetition_penalty"] = (
            params.repetition_penalty
        )
    if kind.name == "mlx_lm":
        if penalties:  # mlx_lm.server counts each penalty over its own window (default 20); 0 slices all.
            for name in ("repetition", "presence", "frequency"):
                body[f"{name}_context_size"] = params.penalty_window
        if "xtc" in runs:
            body["xtc_probability"] = float(params.xtc_probability)
            body["xtc_threshold"] = float(params.xtc_threshold)
    if kind.name == "llama.cpp":
        body.update(_llama_cpp_fields(params, runs, context))
    body.update(grammar_fields(kind, params))
    return body


def llama_cpp_window(window: int, context: int) -> int:
    """A window of "all" (``window`` -1) as llama.cpp takes it: its context per request,
    ``context``. A window as wide as the context is what -1 always meant there (its server
    set -1 to the slot's context), and current servers refuse -1 (their hard limit is
    0..INT32_MAX: a 400); -1 is sent only when the context is unknown (no ``/props``)."""
    return window if window != -1 or context <= 0 else context


def _llama_cpp_fields(params: SamplingParams, runs: set[str], context: int) -> dict[str, Any]:
    """llama.cpp's own names (tools/server/README.md); its window 0 means off, so a window
    of "all" (Logitscope's penalty window 0, DRY's -1) is the context (llama_cpp_window)."""
    body: dict[str, Any] = {
        "repeat_last_n": llama_cpp_window(params.penalty_window or -1, context),
        # Only the stages that run: a listed stage whose value is not sent would run with
        # the server's default (top_k 40, top_p 0.95, min_p 0.05), not switched off.
        # (its grammar is no sampler there: it is sent as ``grammar`` / ``json_schema``)
        "samplers": [
            _LLAMA_CPP_SAMPLER_NAMES.get(s, s)
            for s in params.samplers
            if s in runs and s not in ("mirostat_v2", "grammar")
        ],
    }
    if "mirostat_v2" in runs:  # llama.cpp's ``mirostat`` replaces the samplers list
        body.update(mirostat=2, mirostat_tau=params.mirostat_tau, mirostat_eta=params.mirostat_eta)
    if "typical_p" in runs:
        body["typical_p"] = params.typical_p
    if "top_n_sigma" in runs:
        body["top_n_sigma"] = params.top_n_sigma
    if "xtc" in runs:
        body["xtc_probability"] = params.xtc_probability
        body["xtc_threshold"] = params.xtc_threshold
    if "dry" in runs:
        body["dry_multiplier"] = params.dry_multiplier
        body["dry_base"] = params.dry_base
        body["dry_allowed_length"] = params.dry_allowed_length
        body["dry_penalty_last_n"] = llama_cpp_window(params.dry_penalty_last_n, context)
        if params.dry_sequence_breakers != DEFAULT_DRY_SEQUENCE_BREAKERS:
            body["dry_sequence_breakers"] = list(params.dry_sequence_breakers)
    if "temperature" in runs and params.dynatemp_range:
        body["dynatemp_range"] = params.dynatemp_range
        body["dynatemp_exponent"] = params.dynatemp_exponent
    return body
