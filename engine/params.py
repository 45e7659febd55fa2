"""SamplingParams: the one validated, immutable description of how to sample.

Every field documents its range and its "off" value. Validation happens in
``__post_init__`` so an instance that exists is valid; vocabulary-dependent
checks (``logit_bias`` token ids) live in :meth:`SamplingParams.verify`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Ranges shared with the UI's spin boxes (min, max).
TEMPERATURE_RANGE = (0.0, 100.0)
TOP_K_RANGE = (0, 1_000_000)
TOP_P_RANGE = (0.0, 1.0)  # exclusive at 0
MIN_P_RANGE = (0.0, 1.0)
REPETITION_PENALTY_RANGE = (0.0, 100.0)  # exclusive at 0
PRESENCE_PENALTY_RANGE = (-100.0, 100.0)
FREQUENCY_PENALTY_RANGE = (-100.0, 100.0)
PENALTY_WINDOW_RANGE = (0, 1_000_000)
LOGIT_BIAS_RANGE = (-100.0, 100.0)
MAX_TOKENS_RANGE = (1, 1_000_000)
TOP_LOGPROBS_RANGE = (0, 100)
SEED_RANGE = (0, 2**63 - 1)
MAX_STOP_STRINGS = 16
TYPICAL_P_RANGE = (0.0, 1.0)  # exclusive at 0
TOP_N_SIGMA_RANGE = (0.0, 100.0)
XTC_PROBABILITY_RANGE = (0.0, 1.0)
XTC_THRESHOLD_RANGE = (0.0, 1.0)
DRY_MULTIPLIER_RANGE = (0.0, 100.0)
DRY_BASE_RANGE = (1.0, 100.0)
DRY_ALLOWED_LENGTH_RANGE = (1, 1_000)
DRY_PENALTY_LAST_N_RANGE = (-1, 1_000_000)
MAX_DRY_SEQUENCE_BREAKERS = 32
DRY_SEQUENCE_BREAKER_CHARS = 40  # llama.cpp caps a breaker's tokenized tail likewise
DYNATEMP_RANGE_RANGE = (0.0, 100.0)
DYNATEMP_EXPONENT_RANGE = (0.0, 100.0)

# The reorderable stages. ``bias`` always runs first and the draw last; ``raw`` is
# the model's own distribution (not a stage, the start of every chain).
SAMPLER_STAGES = (
    "penalties",
    "dry",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "top_n_sigma",
    "xtc",
)
DEFAULT_SAMPLERS = SAMPLER_STAGES
# llama.cpp's default order (common/common.h): temperature last.
LLAMA_CPP_SAMPLERS = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typical_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)
STAGE_NAMES = ("raw", "bias", *SAMPLER_STAGES)
"""Every stage name, in a fixed canonical order (the engine packs per-stage data in it)."""
DEFAULT_DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")


class SamplingParamsError(ValueError):
    """A sampling parameter is out of range. ``field`` names it for the UI."""

    def __init__(self, field_name: str, value: Any, message: str) -> None:
        super().__init__(message)
        self.field = field_name
        self.value = value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_float(name: str, value: Any, lo: float, hi: float, lo_open: bool = False) -> float:
    if not _is_number(value) or not math.isfinite(value):
        raise SamplingParamsError(name, value, f"{name} must be a finite number, got {value!r}.")
    ok = (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise SamplingParamsError(name, value, f"{name} must be in {bracket}{lo}, {hi}], got {value}.")
    return float(value)


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SamplingParamsError(name, value, f"{name} must be an integer, got {value!r}.")
    if not lo <= value <= hi:
        raise SamplingParamsError(name, value, f"{name} must be in [{lo}, {hi}], got {value}.")
    return value


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request samples. Defaults are greedy with no penalties."""

    temperature: float = 0.0
    """Divides the logits. In [0, 100]. 0 means greedy (argmax of ``penalized``)."""
    top_k: int = 0
    """Keep the k most likely tokens. In [0, 1e6]. 0 = off."""
    top_p: float = 1.0
    """Keep the smallest set whose probability reaches p. In (0, 1]. 1 = off."""
    min_p: float = 0.0
    """Drop tokens below min_p times the top probability. In [0, 1]. 0 = off."""
    repetition_penalty: float = 1.0
    """Divide positive / multiply negative logits of seen tokens. In (0, 100]. 1 = off."""
    presence_penalty: float = 0.0
    """Subtract from logits of seen tokens. In [-100, 100]. 0 = off."""
    frequency_penalty: float = 0.0
    """Subtract ``f * count`` from logits of seen tokens. In [-100, 100]. 0 = off."""
    penalty_window: int = 64
    """Tokens of prompt + output the penalties count. 0 = all."""
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    """Added to the logits of the given token ids before penalties. Each in [-100, 100]."""
    seed: int | None = None
    """Seed of this request's own RNG. None: a fresh seed is drawn at insert."""
    max_tokens: int = 256
    """Most tokens to generate. In [1, 1e6]."""
    stop: tuple[str, ...] = ()
    """Strings that end the generation; the stop string itself is not emitted."""
    top_logprobs: int = 10
    """Candidates reported per step from ``raw`` and from the last stage. In [0, 100]."""
    samplers: tuple[str, ...] = DEFAULT_SAMPLERS
    """Order of the reorderable stages (names from ``SAMPLER_STAGES``, no duplicates).
    A stage left out does not run. ``bias`` always runs first, the draw last."""
    typical_p: float = 1.0
    """Locally typical sampling (Meister et al. 2022): keep the tokens whose surprisal is
    closest to the entropy until their mass reaches p. In (0, 1]. 1 = off."""
    top_n_sigma: float = 0.0
    """Keep logits >= max - n * sigma over the tokens still in the distribution (Tang et
    al. 2024). In [0, 100]. 0 = off."""
    xtc_probability: float = 0.0
    """Exclude top choices: the chance per token that XTC acts. In [0, 1]. 0 = off."""
    xtc_threshold: float = 0.1
    """XTC removes every token with p >= threshold but the least likely of them, when two
    or more reach it. In [0, 1]; above 0.5 it never acts."""
    dry_multiplier: float = 0.0
    """DRY ("don't repeat yourself"): strength of the penalty. In [0, 100]. 0 = off."""
    dry_base: float = 1.75
    """DRY: the penalty grows as ``multiplier * base ** (length - allowed_length)``. In [1, 100]."""
    dry_allowed_length: int = 2
    """DRY: repeats up to this long are not penalized. In [1, 1000]."""
    dry_penalty_last_n: int = -1
    """DRY: tokens of prompt + output searched for repeats. -1 = the whole context, 0 = off."""
    dry_sequence_breakers: tuple[str, ...] = DEFAULT_DRY_SEQUENCE_BREAKERS
    """DRY: strings that end a repeat (matching never crosses them). At most 32, each 1-40 chars."""
    dynatemp_range: float = 0.0
    """Dynamic temperature: T scales between T - range and T + range with the normalized
    entropy of the tokens still in the distribution (llama.cpp temp_ext). In [0, 100]. 0 = off."""
    dynatemp_exponent: float = 1.0
    """Dynamic temperature: exponent applied to the normalized entropy. In [0, 100]."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "temperature", _check_float("temperature", self.temperature, *TEMPERATURE_RANGE))
        set_(self, "top_k", _check_int("top_k", self.top_k, *TOP_K_RANGE))
        set_(self, "top_p", _check_float("top_p", self.top_p, *TOP_P_RANGE, lo_open=True))
        set_(self, "min_p", _check_float("min_p", self.min_p, *MIN_P_RANGE))
        set_(
            self,
            "repetition_penalty",
            _check_float("repetition_penalty", self.repetition_penalty, *REPETITION_PENALTY_RANGE, True),
        )
        set_(
            self,
            "presence_penalty",
            _check_float("presence_penalty", self.presence_penalty, *PRESENCE_PENALTY_RANGE),
        )
        set_(
            self,
            "frequency_penalty",
            _check_float("frequency_penalty", self.frequency_penalty, *FREQUENCY_PENALTY_RANGE),
        )
        set_(
            self,
            "penalty_window",
            _check_int("penalty_window", self.penalty_window, *PENALTY_WINDOW_RANGE),
        )
        set_(self, "logit_bias", _check_logit_bias(self.logit_bias))
        if self.seed is not None:
            set_(self, "seed", _check_int("seed", self.seed, *SEED_RANGE))
        set_(self, "max_tokens", _check_int("max_tokens", self.max_tokens, *MAX_TOKENS_RANGE))
        set_(self, "stop", _check_stop(self.stop))
        set_(self, "top_logprobs", _check_int("top_logprobs", self.top_logprobs, *TOP_LOGPROBS_RANGE))
        set_(self, "samplers", _check_samplers(self.samplers))
        set_(self, "typical_p", _check_float("typical_p", self.typical_p, *TYPICAL_P_RANGE, lo_open=True))
        set_(self, "top_n_sigma", _check_float("top_n_sigma", self.top_n_sigma, *TOP_N_SIGMA_RANGE))
        for name, bounds in (
            ("xtc_probability", XTC_PROBABILITY_RANGE),
            ("xtc_threshold", XTC_THRESHOLD_RANGE),
            ("dry_multiplier", DRY_MULTIPLIER_RANGE),
            ("dry_base", DRY_BASE_RANGE),
            ("dynatemp_range", DYNATEMP_RANGE_RANGE),
            ("dynatemp_exponent", DYNATEMP_EXPONENT_RANGE),
        ):
            set_(self, name, _check_float(name, getattr(self, name), *bounds))
        set_(
            self,
            "dry_allowed_length",
            _check_int("dry_allowed_length", self.dry_allowed_length, *DRY_ALLOWED_LENGTH_RANGE),
        )
        set_(
            self,
            "dry_penalty_last_n",
            _check_int("dry_penalty_last_n", self.dry_penalty_last_n, *DRY_PENALTY_LAST_N_RANGE),
        )
        set_(self, "dry_sequence_breakers", _check_breakers(self.dry_sequence_breakers))

    @property
    def greedy(self) -> bool:
        """Temperature 0 with the temperature stage in the chain: the argmax of the
        distribution entering ``temperature`` is drawn."""
        return self.temperature == 0.0 and "temperature" in self.samplers

    @property
    def has_penalties(self) -> bool:
        return "penalties" in self.samplers and (
            self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
        )

    @property
    def has_dry(self) -> bool:
        return "dry" in self.samplers and self.dry_multiplier > 0.0 and self.dry_penalty_last_n != 0

    def verify(self, vocab_size: int) -> None:
        """Checks that need the model: every ``logit_bias`` id is in the vocabulary."""
        for token_id in self.logit_bias:
            if not 0 <= token_id < vocab_size:
                raise SamplingParamsError(
                    "logit_bias",
                    token_id,
                    f"logit_bias token ids must be in [0, {vocab_size - 1}], got {token_id}.",
                )

    def with_changes(self, **changes: Any) -> SamplingParams:
        """A validated copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["logit_bias"] = {str(k): v for k, v in self.logit_bias.items()}
        data["stop"] = list(self.stop)
        data["samplers"] = list(self.samplers)
        data["dry_sequence_breakers"] = list(self.dry_sequence_breakers)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SamplingParams:
        """Inverse of :meth:`to_dict`; unknown keys are an error, not silently dropped."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            name = sorted(unknown)[0]
            raise SamplingParamsError(name, data[name], f"unknown sampling parameter {name!r}.")
        values = dict(data)
        if "logit_bias" in values:
            values["logit_bias"] = _parse_bias_keys(values["logit_bias"])
        for name in ("stop", "samplers", "dry_sequence_breakers"):
            if name in values and isinstance(values[name], list):
                values[name] = tuple(values[name])
        return cls(**values)


def _parse_bias_keys(bias: Any) -> dict[int, float]:
    if not isinstance(bias, Mapping):
        raise SamplingParamsError("logit_bias", bias, "logit_bias must be a mapping.")
    out: dict[int, float] = {}
    for key, value in bias.items():
        try:
            out[int(key)] = value
        except (TypeError, ValueError):
            raise SamplingParamsError("logit_bias", key, f"logit_bias keys must be token ids, got {key!r}.") from None
    return out


def _check_logit_bias(bias: Any) -> Mapping[int, float]:
    if not isinstance(bias, Mapping):
        raise SamplingParamsError("logit_bias", bias, f"logit_bias must be a mapping, got {bias!r}.")
    checked: dict[int, float] = {}
    for token_id, value in bias.items():
        if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
            raise SamplingParamsError(
                "logit_bias",
                token_id,
                f"logit_bias token ids must be non-negative integers, got {token_id!r}.",
            )
        checked[token_id] = _check_float("logit_bias", value, *LOGIT_BIAS_RANGE)
    return _FrozenDict(checked)


def _check_stop(stop: Any) -> tuple[str, ...]:
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, Sequence) or not all(isinstance(s, str) for s in stop):
        raise SamplingParamsError("stop", stop, f"stop must be a list of strings, got {stop!r}.")
    if any(s == "" for s in stop):
        raise SamplingParamsError("stop", stop, "stop strings must not be empty.")
    if len(stop) > MAX_STOP_STRINGS:
        raise SamplingParamsError("stop", stop, f"stop must hold at most {MAX_STOP_STRINGS} strings, got {len(stop)}.")
    return tuple(stop)


def _check_samplers(samplers: Any) -> tuple[str, ...]:
    valid = ", ".join(SAMPLER_STAGES)
    if isinstance(samplers, str):
        samplers = tuple(s.strip() for s in samplers.split(",") if s.strip())
    if not isinstance(samplers, Sequence) or not all(isinstance(s, str) for s in samplers):
        raise SamplingParamsError(
            "samplers", samplers, f"samplers must be a list of stage names ({valid}), got {samplers!r}."
        )
    for name in samplers:
        if name not in SAMPLER_STAGES:
            raise SamplingParamsError("samplers", samplers, f"samplers must name stages from {valid}; got {name!r}.")
    if len(set(samplers)) != len(samplers):
        twice = sorted({s for s in samplers if samplers.count(s) > 1})
        raise SamplingParamsError(
            "samplers", samplers, f"samplers must not repeat a stage, got {', '.join(twice)} twice."
        )
    return tuple(samplers)


def _check_breakers(breakers: Any) -> tuple[str, ...]:
    if isinstance(breakers, str):
        breakers = (breakers,)
    if not isinstance(breakers, Sequence) or not all(isinstance(b, str) for b in breakers):
        raise SamplingParamsError(
            "dry_sequence_breakers", breakers, f"dry_sequence_breakers must be a list of strings, got {breakers!r}."
        )
    if len(breakers) > MAX_DRY_SEQUENCE_BREAKERS:
        raise SamplingParamsError(
            "dry_sequence_breakers",
            breakers,
            f"dry_sequence_breakers must hold at most {MAX_DRY_SEQUENCE_BREAKERS} strings, got {len(breakers)}.",
        )
    for b in breakers:
        if not 1 <= len(b) <= DRY_SEQUENCE_BREAKER_CHARS:
            raise SamplingParamsError(
                "dry_sequence_breakers",
                breakers,
                f"dry_sequence_breakers must be 1 to {DRY_SEQUENCE_BREAKER_CHARS} characters each, got {b!r}.",
            )
    return tuple(breakers)


class _FrozenDict(dict):  # type: ignore[type-arg]
    """A dict that refuses mutation, so a frozen SamplingParams stays frozen."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("logit_bias of SamplingParams is immutable; use with_changes().")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))
