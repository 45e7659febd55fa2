"""``dry`` as the app, the CLI and the docs see it (kernel: :mod:`engine.stages.dry`, state:
:mod:`engine.stages.dry_state`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.specs.checks import SamplingParamsError
from engine.specs.spec import Field, StageSpec, Values

DEFAULT_DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")
MAX_DRY_SEQUENCE_BREAKERS = 32
DRY_SEQUENCE_BREAKER_CHARS = 40  # llama.cpp caps a breaker's tokenized tail likewise
_NAME = "dry_sequence_breakers"


def check_breakers(breakers: Any) -> tuple[str, ...]:
    if isinstance(breakers, str):
        breakers = (breakers,)
    if not isinstance(breakers, Sequence) or not all(isinstance(b, str) for b in breakers):
        raise SamplingParamsError(_NAME, breakers, f"{_NAME} must be a list of strings, got {breakers!r}.")
    if len(breakers) > MAX_DRY_SEQUENCE_BREAKERS:
        raise SamplingParamsError(
            _NAME,
            breakers,
            f"{_NAME} must hold at most {MAX_DRY_SEQUENCE_BREAKERS} strings, got {len(breakers)}.",
        )
    for b in breakers:
        if not 1 <= len(b) <= DRY_SEQUENCE_BREAKER_CHARS:
            raise SamplingParamsError(
                _NAME, breakers, f"{_NAME} must be 1 to {DRY_SEQUENCE_BREAKER_CHARS} characters each, got {b!r}."
            )
    return tuple(breakers)


def _neutral(v: Values) -> bool:
    return v.dry_multiplier == 0.0 or v.dry_penalty_last_n == 0


def _describe(v: Values) -> str:
    last = {-1: "all", 0: "0"}.get(v.dry_penalty_last_n, str(v.dry_penalty_last_n))
    return f"×{v.dry_multiplier:g} · base {v.dry_base:g} · allowed {v.dry_allowed_length} · last {last}"


SPEC = StageSpec(
    name="dry",
    summary="DRY (llama.cpp / KoboldCpp): penalizes a token that would extend a repeat of earlier text.",
    order=20,
    fields=(
        Field(
            "dry_multiplier",
            float,
            0.0,
            "DRY strength: a token that would extend a repeat loses multiplier · base^(length − allowed). 0 = off.",
            range=(0.0, 100.0),
            label="Multiplier",
            slider=(0.0, 3.0),
            decimals=2,
        ),
        Field(
            "dry_base",
            float,
            1.75,
            "How fast the DRY penalty grows with the repeat's length (default 1.75).",
            range=(1.0, 100.0),
            label="Base",
            slider=(1.0, 4.0),
            decimals=2,
        ),
        Field(
            "dry_allowed_length",
            int,
            2,
            "Repeats up to this many tokens are not penalized (default 2).",
            range=(1, 1_000),
            label="Allowed length",
            slider=(1, 10),
        ),
        Field(
            "dry_penalty_last_n",
            int,
            -1,
            "Tokens of prompt + output searched for repeats. −1 = the whole context, 0 = off.",
            range=(-1, 1_000_000),
            label="Last n tokens",
            slider=(-1, 4096),
        ),
        Field(
            _NAME,
            tuple,
            DEFAULT_DRY_SEQUENCE_BREAKERS,
            "one string per line; a repeat never extends across one. "
            'Escapes: \\n newline, \\t tab, \\\\ backslash. Default: \\n : " *. An empty list: no breakers.',
            label="Sequence breakers",
            flag="--dry-sequence-breaker",
            check=check_breakers,
        ),
    ),
    neutral=_neutral,
    definition="a token that would extend a repeat of length `L >= allowed_length` loses "
    "`multiplier · base^(L − allowed_length)` (exponent capped at `⌊88.72 / ln base⌋`); the repeat never "
    "reaches back past the last sequence breaker; tokens containing a breaker are never penalized; searched "
    "over the last `dry_penalty_last_n` tokens of prompt + output (−1 = all, 0 = off)",
    off="multiplier 0",
    reference="llama.cpp `llama_sampler_dry_apply` (KoboldCpp's DRY)",
    describe=_describe,
    label=lambda v: f"DRY {v.dry_multiplier:g}",
)
