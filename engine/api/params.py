"""SamplingParams: the one validated, immutable description of how to sample.

Every field documents its range and its "off" value. The general fields are declared
here; each stage's fields come from its spec (``engine/specs/<name>.py``, see
:mod:`engine.specs.registry`), with their ranges, defaults and checks. Validation
happens in ``__post_init__`` so an instance that exists is valid; vocabulary-dependent
checks (``logit_bias`` token ids) live in :meth:`SamplingParams.verify`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from engine.specs.checks import SamplingParamsError, check_float, check_int
from engine.specs.dry import DEFAULT_DRY_SEQUENCE_BREAKERS
from engine.specs.registry import DEFAULT_SAMPLERS, FIELDS, SAMPLER_STAGES, SPECS, STAGE_NAMES

# Ranges of the general fields, shared with the UI's spin boxes (min, max); a stage
# field's range is in its spec (``engine.specs.registry.FIELDS[name].range``).
LOGIT_BIAS_RANGE = (-100.0, 100.0)
MAX_TOKENS_RANGE = (1, 1_000_000)
TOP_LOGPROBS_RANGE = (0, 100)
SEED_RANGE = (0, 2**63 - 1)
THINKING_BUDGET_RANGE = (1, 1_000_000)
MAX_STOP_STRINGS = 16

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
__all__ = [
    "DEFAULT_DRY_SEQUENCE_BREAKERS",
    "DEFAULT_SAMPLERS",
    "LLAMA_CPP_SAMPLERS",
    "SAMPLER_STAGES",
    "STAGE_NAMES",
    "SamplingParams",
    "SamplingParamsError",
]
_TYPE_NAMES = {float: "float", int: "int", tuple: "tuple[str, ...]"}


def _with_stage_fields(cls: type) -> type:
    """Add every stage field (name, type, default) to the class before ``dataclass`` reads it."""
    annotations = dict(cls.__dict__.get("__annotations__", {}))
    for spec_field in FIELDS.values():
        annotations[spec_field.name] = _TYPE_NAMES[spec_field.kind]
        setattr(cls, spec_field.name, spec_field.default)
    cls.__annotations__ = annotations
    return cls


@dataclass(frozen=True, slots=True)
@_with_stage_fields
class SamplingParams:
    """How one request samples. Defaults are greedy with no penalties.

    Besides the fields below, one field per stage parameter (``temperature``, ``top_k``,
    ``dry_sequence_breakers``, ...), declared in the stage's spec."""

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
    think_variant: SamplingParams | None = None
    """A reasoning model's settings from the token after the end of its thinking, applied
    as a live change is (``Scheduler.update_params``; its ``seed`` None keeps the request's).
    None: these settings throughout. It has no ``think_variant`` of its own."""
    thinking_budget: int | None = None
    """Most thinking tokens of a reasoning model's reply: after that many the engine forces
    the end-of-thinking marker. None: no limit. In [1, 1e6]."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name, spec_field in FIELDS.items():
            set_(self, name, spec_field.validate(getattr(self, name)))
        set_(self, "logit_bias", _check_logit_bias(self.logit_bias))
        if self.seed is not None:
            set_(self, "seed", check_int("seed", self.seed, *SEED_RANGE))
        set_(self, "max_tokens", check_int("max_tokens", self.max_tokens, *MAX_TOKENS_RANGE))
        set_(self, "stop", _check_stop(self.stop))
        set_(self, "top_logprobs", check_int("top_logprobs", self.top_logprobs, *TOP_LOGPROBS_RANGE))
        set_(self, "samplers", _check_samplers(self.samplers))
        set_(self, "think_variant", _check_think_variant(self.think_variant))
        if self.thinking_budget is not None:
            set_(self, "thinking_budget", check_int("thinking_budget", self.thinking_budget, *THINKING_BUDGET_RANGE))

    @property
    def greedy(self) -> bool:
        """Temperature 0 with the temperature stage in the chain: the argmax of the
        distribution entering ``temperature`` is drawn."""
        return self.temperature == 0.0 and "temperature" in self.samplers

    def stage_active(self, stage: str) -> bool:
        """Whether ``stage`` runs for a row with these parameters (in the chain, not neutral)."""
        return SPECS[stage].active(self)

    @property
    def has_penalties(self) -> bool:
        return self.stage_active("penalties")

    @property
    def has_dry(self) -> bool:
        return self.stage_active("dry")

    def verify(self, vocab_size: int) -> None:
        """Checks that need the model: every ``logit_bias`` id is in the vocabulary."""
        for token_id in self.logit_bias:
            if not 0 <= token_id < vocab_size:
                raise SamplingParamsError(
                    "logit_bias",
                    token_id,
                    f"logit_bias token ids must be in [0, {vocab_size - 1}], got {token_id}.",
                )
        if self.think_variant is not None:
            try:
                self.think_variant.verify(vocab_size)
            except SamplingParamsError as exc:  # named by the field that holds it, for the UI
                raise SamplingParamsError("think_variant", self.think_variant, f"think_variant: {exc}") from None

    def answer_settings(self) -> SamplingParams | None:
        """The settings from a reasoning model's first answer token: ``think_variant`` with
        this request's ``seed`` where the variant names none, and always this request's
        ``max_tokens`` (the limit of the whole reply, thinking and answer together: an
        answer's own smaller one would end the reply at its first token). None without a
        variant."""
        variant = self.think_variant
        if variant is None:
            return None
        seed = variant.seed if variant.seed is not None else self.seed
        return variant.with_changes(seed=seed, max_tokens=self.max_tokens)

    def with_changes(self, **changes: Any) -> SamplingParams:
        """A validated copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["logit_bias"] = {str(k): v for k, v in self.logit_bias.items()}
        for name in _LIST_FIELDS:
            data[name] = list(getattr(self, name))
        if self.think_variant is not None:
            data["think_variant"] = self.think_variant.to_dict()
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
        for name in _LIST_FIELDS:
            if name in values and isinstance(values[name], list):
                values[name] = tuple(values[name])
        if isinstance(values.get("think_variant"), Mapping):
            values["think_variant"] = cls.from_dict(values["think_variant"])
        return cls(**values)


_LIST_FIELDS = ("stop", "samplers", *(name for name, f in FIELDS.items() if f.kind is tuple))


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
        checked[token_id] = check_float("logit_bias", value, *LOGIT_BIAS_RANGE)
    return _FrozenDict(checked)


def _check_think_variant(variant: Any) -> SamplingParams | None:
    if variant is None:
        return None
    if not isinstance(variant, SamplingParams):
        raise SamplingParamsError(
            "think_variant", variant, f"think_variant must be SamplingParams or None, got {type(variant).__name__}."
        )
    if variant.think_variant is not None:
        raise SamplingParamsError("think_variant", variant, "think_variant must not have a think_variant of its own.")
    return variant


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


class _FrozenDict(dict):  # type: ignore[type-arg]
    """A dict that refuses mutation, so a frozen SamplingParams stays frozen."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("logit_bias of SamplingParams is immutable; use with_changes().")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))
