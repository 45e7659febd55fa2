"""``grammar`` as the app, the CLI and the docs see it (kernel and matchers:
:mod:`engine.stages.grammar`).

Structured output: a JSON schema, a regular expression, a Lark or GBNF grammar, or any
JSON object, compiled by llguidance (the matcher llama.cpp, vLLM and SGLang use). Its one
field is ``grammar``: ``()`` (off) or ``(kind, text)``. The grammar is compiled when the
parameters are made, so one that cannot be is refused with llguidance's own message before
anything starts; the tokenizer's part waits for the model (``engine.stages.vocabulary``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from engine.specs.checks import SamplingParamsError
from engine.specs.spec import Field, StageSpec, Values

GRAMMAR_KINDS = ("json", "json_schema", "regex", "lark", "gbnf")
"""``json``: any JSON object (OpenAI's ``json_object``; its text is ignored and stored
empty); ``json_schema``: a JSON schema; ``regex``: the whole reply matches it (Rust's
``regex`` syntax); ``lark``: llguidance's Lark dialect; ``gbnf``: llama.cpp's GBNF."""
KIND_WORDS = {
    "json": "any JSON object",
    "json_schema": "JSON schema",
    "regex": "regex",
    "lark": "Lark grammar",
    "gbnf": "GBNF grammar",
}
ANY_JSON_SCHEMA = '{"type": "object"}'
MAX_GRAMMAR_CHARS = 1_000_000
_NAME = "grammar"


@lru_cache(maxsize=32)
def compiled(kind: str, text: str) -> str:
    """llguidance's grammar for ``(kind, text)`` (a JSON string ``LLMatcher`` takes), checked
    without a tokenizer; raises ``ValueError`` with llguidance's message. Kept for the last
    few: every copy of the parameters (a live change, a branch) checks its grammar again."""
    from llguidance import LLMatcher, grammar_from

    source = ANY_JSON_SCHEMA if kind == "json" else text
    fmt = "gbnf" if kind == "gbnf" else kind
    grammar = grammar_from(fmt, source)  # GBNF is converted to Lark (ValueError when it cannot be)
    error = LLMatcher.validate_grammar(grammar)
    if error:
        raise ValueError(error.strip())
    return grammar


def check_grammar(value: Any) -> tuple[str, ...]:
    """``()`` or ``(kind, text)``, compiled by llguidance; a list is taken as a tuple."""
    if isinstance(value, list):
        value = tuple(value)
    if value == ():
        return ()
    if not isinstance(value, tuple) or len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise SamplingParamsError(_NAME, value, f"{_NAME} must be () or (kind, text), got {value!r}.")
    kind, text = value
    if kind not in GRAMMAR_KINDS:
        raise SamplingParamsError(
            _NAME, value, f"{_NAME} kind must be one of {', '.join(GRAMMAR_KINDS)}, got {kind!r}."
        )
    if kind == "json":
        text = ""
    elif not text.strip():
        raise SamplingParamsError(_NAME, value, f"the {KIND_WORDS[kind]} is empty.")
    if len(text) > MAX_GRAMMAR_CHARS:
        raise SamplingParamsError(_NAME, value, f"the {KIND_WORDS[kind]} is over {MAX_GRAMMAR_CHARS:,} characters.")
    try:
        compiled(kind, text)
    except (ValueError, TypeError) as exc:
        raise SamplingParamsError(_NAME, value, f"the {KIND_WORDS[kind]} cannot be compiled: {exc}") from None
    return (kind, text)


def describe(grammar: Sequence[str]) -> str:
    """A few words for a grammar: its kind and the start of its text."""
    if not grammar:
        return "off"
    kind, text = grammar
    if kind == "json":
        return KIND_WORDS[kind]
    first = " ".join(text.split())
    return f"{KIND_WORDS[kind]} {first[:24]}{'…' if len(first) > 24 else ''}"


def replay_consumed(
    state: tuple[tuple[str, ...], int] | None, values: Values, _logprob: float | None
) -> tuple[tuple[str, ...], int]:
    """What a branch restores after one recorded token: the grammar in force and how many
    tokens of the output it has read (another grammar starts from its first token)."""
    if state is None or tuple(state[0]) != values.grammar:
        return (values.grammar, 1)
    return (values.grammar, state[1] + 1)


def check_consumed(value: Any) -> tuple[tuple[str, ...], int]:
    """A carried ``(grammar, tokens read)``, checked (a list is taken as a tuple)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"grammar must be (grammar, tokens read), got {value!r}")
    grammar, read = value
    if isinstance(read, bool) or not isinstance(read, int) or read < 0:
        raise ValueError(f"grammar's tokens read must be a count, got {read!r}")
    try:
        return (check_grammar(grammar), read)
    except SamplingParamsError as exc:
        raise ValueError(str(exc)) from None


SPEC = StageSpec(
    name="grammar",
    summary="Structured output: keeps only the tokens a JSON schema, regex or grammar allows next (llguidance).",
    order=5,
    fields=(
        Field(
            _NAME,
            tuple,
            (),
            "Structured output: () off, or (kind, text) with kind json (any JSON object), json_schema, regex, "
            "lark or gbnf; compiled by llguidance, refused with its message when it cannot be.",
            label="Structured output",
            check=check_grammar,
            flags=("--json-schema", "--json-object", "--regex", "--grammar"),
        ),
    ),
    neutral=lambda v: not v.grammar,
    definition="keep the tokens the grammar allows after the output so far (llguidance's token mask); where a "
    "stage before it left none of them, the allowed tokens with their `raw` logits; a hard constraint: greedy "
    "rows draw among them wherever it stands; once complete only an end-of-sequence token is allowed, which "
    "ends the reply; a forced token it forbids (a branch, a scored text) leaves the grammar, which then keeps "
    "every token",
    off="none set",
    reference="llguidance `LLMatcher` (llama.cpp, vLLM and SGLang's matcher), its own mask computed independently",
    describe=lambda v: describe(v.grammar),
    label=lambda v: describe(v.grammar),
    default_on=False,
    constraint=True,
    replay=replay_consumed,
    check_carry=check_consumed,
)
