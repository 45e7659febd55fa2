"""Helpers of the engine fuzzer (tests/engine/runtime/test_engine_fuzz.py): tiny models built once per
process, a plain model of what each request should be (``Spec``), events in a comparable
form, the solo replay of one request, and the counters the long campaign prints."""

from __future__ import annotations

import atexit
import math
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.api.carry import carry_from_steps
from engine.api.events import Divergence, Finished, PrefillProgress, TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel, load
from engine.runtime.scheduler import Scheduler

# Cache kinds: llama = KVCache; lfm2 = ArraysCache (recurrent) + KVCache;
# gemma3_text = RotatingKVCache (window 16, wraps) + KVCache.
ARCHS = ("llama", "lfm2", "gemma3_text")

_MODELS: dict[str, LoadedModel] = {}
_FOLDER: Path | None = None


def tiny_loaded(arch: str) -> LoadedModel:
    """The tiny random-weight model of ``arch``, written and loaded once per process."""
    global _FOLDER
    if arch not in _MODELS:
        from tests.support.tiny_archs import write_tiny_arch
        from tests.support.tiny_model import write_tiny_model

        if _FOLDER is None:
            _FOLDER = Path(tempfile.mkdtemp(prefix="logitscope-fuzz-"))
            atexit.register(shutil.rmtree, _FOLDER, ignore_errors=True)
        folder = _FOLDER / arch
        written = write_tiny_model(folder) if arch == "llama" else write_tiny_arch(folder, arch)
        _MODELS[arch] = load(str(written))
    return _MODELS[arch]


def with_context(loaded: LoadedModel, context: int) -> LoadedModel:
    return loaded if context == loaded.context_length else replace(loaded, context_length=context)


# Counters -----------------------------------------------------------------------------

RULE_CALLS: Counter[str] = Counter()
"""Rule calls by rule name (a rule with several engine calls, e.g. ``step(n)``, counts once)."""
REJECTIONS: Counter[str] = Counter()
"""Rejections by message template (numbers and quoted values replaced)."""
OUTCOMES: Counter[str] = Counter()
"""accepted / rejected per call kind, replays compared, and so on."""


def template(message: str) -> str:
    """A rejection message with its values replaced: one key per kind of rejection."""
    text = str(message).split("\n")[0]
    text = re.sub(r"\bgot .*$", "got <value>", text)
    text = re.sub(r"\bwith id .+?( to branch from)?\.$", r"with id <value>\1.", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "<s>", text)
    text = re.sub(r"-?\d+(\.\d+)?(e[+-]?\d+)?", "<n>", text)
    return text


def note_rejection(call: str, error: BaseException) -> None:
    REJECTIONS[f"{type(error).__name__}: {template(str(error))}"] += 1
    OUTCOMES[f"{call} rejected"] += 1


# Events in a comparable form --------------------------------------------------------------


def _f(values) -> tuple[str, ...]:
    return tuple(repr(float(v)) for v in values)  # exact, and nan == nan


def event_key(event) -> tuple:
    """Everything an event says except wall-clock rates, with floats compared exactly."""
    if isinstance(event, TokenStep):
        top = tuple(
            (
                c.token_id,
                c.text,
                repr(c.raw_logit),
                _f(c.logprobs),
                c.removed_by,
                repr(c.bias),
                repr(c.penalty),
                c.count,
            )
            for c in event.top
        )
        return (
            "token",
            event.request_id,
            event.index,
            event.position,
            event.token_id,
            event.text,
            event.piece,
            event.chain,
            _f(event.logprobs),
            _f(event.entropies),
            event.survivors,
            top,
            event.params,
            event.forced,
        )
    if isinstance(event, Finished):
        return (
            "finished",
            event.request_id,
            event.finish_reason,
            event.prompt_tokens,
            event.generated_tokens,
            event.prefilled_tokens,
            event.text,
            event.stop,
            getattr(event, "error", None),
        )
    if isinstance(event, PrefillProgress):
        return ("prefill", event.request_id, event.done, event.total)
    if isinstance(event, Divergence):
        return ("divergence", event.group, event.index, event.pairs, _f(event.js), event.first_difference)
    raise AssertionError(f"the engine emitted an unknown event {event!r}")


# The model of one request ------------------------------------------------------------------


@dataclass
class Spec:
    """What the fuzzer knows of one request: how it was made and what it emitted."""

    id: int
    kind: str  # insert | fork | branch | continue | fork_from (fork_from and fork_output)
    base: list[int]
    """The prompt before any earlier output."""
    earlier: list[int]
    """Output that came before this request (branch / continue / fork_from)."""
    forced: int | None
    params: SamplingParams
    """The parameters it started with, seed resolved."""
    group: int | None = None
    changes: list[tuple[int, SamplingParams]] = field(default_factory=list)
    """update_params calls: (the output index they apply from, the parameters, seed resolved)."""
    tokens: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finished: Finished | None = None
    cancelled: bool = False
    earlier_steps: list[TokenStep] | None = None
    """The steps of ``earlier`` where the engine made them (a branch, a fork_from): the
    solo replay folds the carried stage state (mirostat's μ) from them, as the app does."""
    steps: list[TokenStep] = field(default_factory=list)

    @property
    def offset(self) -> int:
        return len(self.earlier)

    @property
    def current(self) -> SamplingParams:
        return self.changes[-1][1] if self.changes else self.params

    @property
    def next_index(self) -> int:
        return self.offset + len(self.tokens)

    @property
    def history(self) -> list[int]:
        return self.base + self.earlier + self.tokens

    @property
    def live(self) -> bool:
        return self.finished is None and not self.cancelled


# Solo replay --------------------------------------------------------------------------------


@dataclass
class Replay:
    tokens: list[int]
    steps: list[TokenStep]
    finished: Finished | None
    skipped: str | None = None


def replay(loaded: LoadedModel, spec: Spec, prefill_chunk: int, sample_ahead: bool, limit: int | None) -> Replay:
    """``spec`` run alone on a fresh scheduler: the same start and the same update_params at
    the same output indices. ``limit``: stop after that many tokens (a cancelled request)."""
    scheduler = Scheduler(loaded, prefill_chunk=prefill_chunk, sample_ahead=sample_ahead)
    if spec.kind in ("insert", "fork") or (spec.kind == "fork_from" and not spec.earlier):
        rid = scheduler.insert(spec.base, spec.params)
    elif spec.kind in ("branch", "continue"):
        rid = scheduler.continue_output(spec.base, spec.earlier, spec.forced, spec.params, carry=_carry(spec))
    elif spec.kind == "fork_from":  # fork_output: fork_from for a reply the scheduler does not hold
        (rid,) = scheduler.fork_output(spec.base, spec.earlier, [spec.params], carry=_carry(spec))
    else:
        raise AssertionError(spec.kind)
    changes = list(spec.changes)
    tokens: list[int] = []
    steps: list[TokenStep] = []
    finished = None

    def apply_due() -> None:
        while changes and changes[0][0] == spec.offset + len(tokens):
            scheduler.update_params(rid, changes.pop(0)[1])

    apply_due()
    for _ in range(100_000):
        if finished is not None or (limit is not None and len(tokens) >= limit):
            break
        for event in scheduler.step():
            if isinstance(event, TokenStep) and event.request_id == rid:
                tokens.append(event.token_id)
                steps.append(event)
            elif isinstance(event, Finished) and event.request_id == rid:
                finished = event
        if finished is None:
            apply_due()
    return Replay(tokens, steps, finished)


def _carry(spec: Spec) -> dict | None:
    """A branch restores its original's carried state; the solo replay, a continuation of a
    reply it does not hold, rebuilds it from the original's steps (None: afresh)."""
    return carry_from_steps(spec.earlier_steps) if spec.earlier_steps else None


def describe_mismatch(spec: Spec, solo: Replay, decode: Callable) -> str:
    first = next(
        (i for i, (a, b) in enumerate(zip(spec.tokens, solo.tokens, strict=False)) if a != b),
        min(len(spec.tokens), len(solo.tokens)),
    )
    margin = ""
    if first < len(solo.steps):
        step = solo.steps[first]
        ranked = sorted((c.logprob for c in step.top if math.isfinite(c.logprob)), reverse=True)
        if len(ranked) > 1:
            margin = f" (solo margin of its top two after the last stage: {ranked[0] - ranked[1]:.3g})"
    return (
        f"request {spec.id} ({spec.kind}, offset {spec.offset}, changes at "
        f"{[i for i, _ in spec.changes]}) differs from its solo replay at output {first}{margin}:\n"
        f"  in the fuzzed run: {spec.tokens} ({spec.finished.finish_reason if spec.finished else None})\n"
        f"  solo:              {solo.tokens} ({solo.finished.finish_reason if solo.finished else None})\n"
        f"  params: {spec.params}"
    )
