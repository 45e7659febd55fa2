"""Structured output on a server: the request field each kind takes a grammar in, the kinds
that cannot take one (refused, never sent and silently ignored), and what its logprobs are
under a grammar (docs/REMOTE.md, "Structured output").

A server applies the grammar itself: its reply follows it, but the numbers it reports are
its own. vLLM (``logprobs_mode`` raw, its default), llama.cpp's server and LM Studio (llama.cpp
underneath) compute their logprobs from the model's logits before any sampler, the grammar's
mask included: a candidate the grammar forbade may show there with its probability, and the
mass the mask removed is not known. For the others it is not documented either way.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from engine.api.params import SamplingParams, SamplingParamsError
from engine.specs.grammar import ANY_JSON_SCHEMA, KIND_WORDS

if TYPE_CHECKING:
    from engine.remote.kind import ServerKind

# The grammar kinds each server kind takes (engine.specs.grammar.GRAMMAR_KINDS).
TAKES: dict[str, frozenset[str]] = {
    "vllm": frozenset({"json", "json_schema", "regex", "lark", "gbnf"}),
    "sglang": frozenset({"json", "json_schema", "regex", "gbnf"}),
    "llama.cpp": frozenset({"json", "json_schema", "gbnf"}),
    "lmstudio": frozenset({"json", "json_schema"}),
    "ollama": frozenset({"json", "json_schema"}),
    "openai": frozenset({"json", "json_schema"}),
    "mlx_lm": frozenset(),
}
BEFORE_MASK = frozenset({"vllm", "llama.cpp", "lmstudio"})
"""The kinds whose logprobs are the model's own, from before the grammar's mask."""


def grammar_refusals(kind: ServerKind, params: SamplingParams) -> list[SamplingParamsError]:
    """The grammar, where ``kind`` cannot take it: one error on ``grammar``, saying what it takes."""
    if not params.grammar or params.grammar[0] in TAKES.get(kind.name, frozenset()):
        return []
    takes = sorted(TAKES.get(kind.name, frozenset()), key=list(KIND_WORDS).index)
    what = ", ".join(KIND_WORDS[k] for k in takes)
    instead = f"it takes {what}" if takes else "it does not constrain its output"
    return [
        SamplingParamsError(
            "grammar",
            params.grammar,
            f"{kind.title} does not take a {KIND_WORDS[params.grammar[0]]}: {instead}. "
            "Use it with a local model, or choose None in Structured output.",
        )
    ]


def grammar_fields(kind: ServerKind, params: SamplingParams) -> dict[str, Any]:
    """The request fields of ``params.grammar`` for ``kind`` (none without one; a kind that
    cannot take it was refused before: :func:`grammar_refusals`)."""
    if not params.grammar:
        return {}
    grammar_kind, text = params.grammar
    name = kind.name
    if grammar_kind == "json":
        if name == "lmstudio":  # it takes json_schema only: any object is that schema
            return _response_schema(ANY_JSON_SCHEMA)
        if name == "llama.cpp":  # its /v1/completions reads json_schema and grammar, not response_format
            return {"json_schema": json.loads(ANY_JSON_SCHEMA)}
        return {"response_format": {"type": "json_object"}}
    if grammar_kind == "json_schema":
        if name == "llama.cpp":
            return {"json_schema": json.loads(text)}
        return _response_schema(text)
    if name == "vllm":  # structured_outputs since vLLM 0.10 (the guided_* fields went in 0.12)
        return {"structured_outputs": {"regex" if grammar_kind == "regex" else "grammar": text}}
    if name == "sglang":
        return {"regex": text} if grammar_kind == "regex" else {"ebnf": text}
    if name == "llama.cpp":
        return {"grammar": text}
    return {}


def _response_schema(schema: str) -> dict[str, Any]:
    return {
        "response_format": {"type": "json_schema", "json_schema": {"name": "logitscope", "schema": json.loads(schema)}}
    }


def grammar_note(kind: ServerKind) -> str:
    """What the server's numbers are under a grammar, for the app and the docs."""
    if not TAKES.get(kind.name):
        return f"{kind.title} does not constrain its output."
    if kind.name in BEFORE_MASK:
        return (
            f"{kind.title} applies the grammar itself. Its logprobs are the model's own, from before the "
            "grammar's mask: a candidate the grammar forbade may show with its probability, and the mass "
            "the mask removed is not reported."
        )
    return (
        f"{kind.title} applies the grammar itself. Whether its logprobs are from before or after the "
        "grammar's mask is not documented; the mass the mask removed is not reported."
    )
