"""The state of one request inside the scheduler, and the checks on what enters it."""

from __future__ import annotations

import operator
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.api.draft import DraftStats
from engine.api.errors import EngineError
from engine.api.events import Finished, FinishReason, TokenStep
from engine.api.grammar import NO_GRAMMAR_STATS, GrammarStats
from engine.api.params import SamplingParams
from engine.runtime.detokenize import StopText, StreamDecoder
from engine.runtime.reasoning_phase import PhaseTracker
from engine.sampling.unpack import RowInspection
from engine.stages.penalty_counts import leaving_token


def check_tokens(value: object, name: str, vocab_size: int, allow_empty: bool = False) -> list[int]:
    """A clean copy of ``value`` as a list of token ids, or an EngineError naming ``name``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise EngineError(f"{name} must be a sequence of token ids, got {type(value).__name__}.")
    if len(value) == 0 and not allow_empty:
        raise EngineError(f"{name} must hold at least one token, got an empty {name}.")
    tokens: list[int] = []
    for i, token in enumerate(value):
        tokens.append(check_token(token, f"{name} token {i}", vocab_size))
    return tokens


def check_token(token: object, name: str, vocab_size: int) -> int:
    """One token id: an int (numpy integers too, not bools, floats or arrays) in the vocabulary."""
    if isinstance(token, bool):
        raise EngineError(f"{name} must be an integer id, got {token!r}.")
    try:
        token = operator.index(token)  # ints and numpy integer scalars; TypeError for the rest
    except TypeError:
        raise EngineError(f"{name} must be an integer id, got {token!r}.") from None
    if not 0 <= token < vocab_size:
        raise EngineError(f"{name} must be in [0, {vocab_size - 1}], got {token}.")
    return token


def check_request_id(value: object) -> int:
    """A request id as an int; bools, floats and unhashable values are refused, not matched."""
    if isinstance(value, bool):
        raise EngineError(f"a request id must be an integer, got {value!r}.")
    try:
        return operator.index(value)
    except TypeError:
        raise EngineError(f"a request id must be an integer, got {value!r}.") from None


def check_prompt(prompt: object, vocab_size: int, context_length: int) -> list[int]:
    """A clean copy of ``prompt`` as a list of ints, or an EngineError saying what is wrong."""
    tokens = check_tokens(prompt, "prompt", vocab_size)
    if len(tokens) >= context_length:
        raise EngineError(
            f"prompt must be shorter than the model's context ({context_length} tokens), got {len(tokens)} tokens."
        )
    return tokens


def check_params(params: object, vocab_size: int) -> SamplingParams:
    if not isinstance(params, SamplingParams):
        raise EngineError(f"params must be SamplingParams, got {type(params).__name__}.")
    params.verify(vocab_size)
    if params.seed is None:
        # A fresh seed from the OS, never from a global RNG that others share.
        params = params.with_changes(seed=secrets.randbits(63))
    return params


@dataclass
class Request:
    id: int
    prompt: list[int]
    params: SamplingParams
    decoder: StreamDecoder
    stop_text: StopText
    generated: list[int] = field(default_factory=list)
    index_offset: int = 0
    """Tokens of output that came before this request (a branch continues an earlier reply)."""
    forced_first: int | None = None
    prefilled: int = 0
    fed: int = 0
    """Tokens run through the model into this request's cache (prompt, then output)."""
    reused: int = 0
    caches: list | None = None  # per-layer caches while prefilling
    first_token_at: float | None = None
    prefill_seconds: float = 0.0
    group: int | None = None
    """The fork group (the id of the request that prefilled for it), or None."""
    followers: list[Request] = field(default_factory=list)
    """Requests of a fork group waiting for this request's prefill to share it."""
    finished: bool = False
    """Its Finished event was made (it is never made twice)."""
    carry_in: dict[str, Any] | None = None
    """Carried stage state to start from (a branch restores mirostat's μ), by stage name."""
    carries: list[dict[str, Any]] = field(default_factory=list)
    """The carried stage state before each generated token (``generated[i]``)."""
    phases: PhaseTracker | None = None
    """A reasoning model's phase tracker (``engine.runtime.reasoning_rows``), made at the first token."""
    forcing: list[int] = field(default_factory=list)
    """The rest of an end-of-thinking marker the thinking budget forces, token by token."""
    switch_to: SamplingParams | None = None
    """``think_variant`` to apply after this step: the thinking has just ended."""
    before_switch: tuple[int, SamplingParams] | None = None
    """(the first output index the variant sampled, the settings before it): a branch in
    the thinking takes the thinking's settings."""
    draft_stats: DraftStats | None = None
    """Its speculative decoding so far; None: no block was drafted."""
    grammar_stats: GrammarStats | None = None
    """Its structured output so far; None: no token was generated under a grammar."""

    @property
    def history(self) -> list[int]:
        """Prompt + output as one new list (O(length): not for per-step use)."""
        return self.prompt + self.generated

    @property
    def history_length(self) -> int:
        return len(self.prompt) + len(self.generated)

    def leaving_token(self) -> int | None:
        return leaving_token(self.params.penalty_window, self.prompt, self.generated)

    def leaving_next(self) -> int | None:
        """The token that will leave the penalty window when the next one arrives."""
        return leaving_token(self.params.penalty_window, self.prompt, self.generated, coming=1)

    @property
    def next_index(self) -> int:
        return self.index_offset + len(self.generated)

    def prefill_remaining(self) -> int:
        return len(self.prompt) - self.prefilled


@dataclass(frozen=True)
class RequestRecord:
    """What is kept of a finished request, enough to branch from it later."""

    prompt: tuple[int, ...]
    generated: tuple[int, ...]
    index_offset: int
    params: SamplingParams
    carries: tuple[dict[str, Any], ...] = ()
    """The carried stage state before each generated token."""
    before_switch: tuple[int, SamplingParams] | None = None
    """``Request.before_switch``: the settings before ``think_variant`` applied."""

    def params_at(self, position: int) -> SamplingParams:
        """The settings to continue with at output ``position``: the thinking's before the
        switch to ``think_variant``, else the last ones."""
        if self.before_switch is not None and position < self.before_switch[0]:
            return self.before_switch[1]
        return self.params

    def carry_at(self, position: int) -> dict[str, Any] | None:
        """The carried stage state before output ``position`` (None: not known, rebuilt fresh)."""
        i = position - self.index_offset
        return self.carries[i] if 0 <= i < len(self.carries) else None

    def split(self, position: int) -> tuple[list[int], list[int]]:
        """(the prompt before any output, the output before ``position``)."""
        earlier = len(self.prompt) - self.index_offset
        output = list(self.prompt[earlier:]) + list(self.generated[: position - self.index_offset])
        return list(self.prompt[:earlier]), output

    def check_position(self, position: int) -> None:
        first, last = self.index_offset, self.index_offset + len(self.generated) - 1
        if isinstance(position, bool) or not isinstance(position, int):
            raise EngineError(f"position must be an integer, got {position!r}.")
        if not first <= position <= last:
            raise EngineError(f"position must be in [{first}, {last}] (the generated range), got {position}.")


def record_of(request: Request) -> RequestRecord:
    return RequestRecord(
        tuple(request.prompt),
        tuple(request.generated),
        request.index_offset,
        request.params,
        tuple(request.carries),
        request.before_switch,
    )


def new_request(
    request_id: int,
    prompt: list[int],
    params: SamplingParams,
    decode,
    earlier_output: Sequence[int] = (),
    earlier_text: str = "",
) -> Request:
    decoder = StreamDecoder.resume(decode, earlier_output) if earlier_output else StreamDecoder(decode)
    # The earlier output's text up to its last complete character, released already.
    earlier_text = decoder.released if earlier_output else earlier_text
    stop_text = StopText(params.stop, text=earlier_text, released=len(earlier_text), boundary=len(earlier_text))
    return Request(request_id, prompt, params, decoder, stop_text)


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 2) if seconds > 0 else 0.0


def accept_token(
    request: Request,
    inspection: RowInspection,
    forced: bool,
    eos_ids: Collection[int],
    context_length: int,
    piece: Callable[[int], str],
    phase: str | None = None,
) -> tuple[TokenStep, FinishReason | None, str | None]:
    """Append the drawn token: (its TokenStep, the finish reason or None, the stop string).
    ``phase``: the token's reasoning phase (``engine.runtime.reasoning_rows.phase_of``)."""
    token = inspection.token_id
    if request.first_token_at is None:
        request.first_token_at = time.perf_counter()
    index = request.next_index
    position = request.history_length
    request.generated.append(token)
    reason, stop = None, None
    if token in eos_ids:
        # EOS writes nothing, but text held back before it (a possible start of a stop
        # string, an incomplete character) is the reply's end: release it.
        reason, stop = FinishReason.STOP, piece(token)
        delta = request.stop_text.add(request.decoder.flush())[0] + request.stop_text.flush()
    else:
        delta, stop = request.stop_text.add(request.decoder.add(token))
        if stop is not None:
            reason = FinishReason.STOP
    if reason is None and (index + 1 >= request.params.max_tokens or position + 1 >= context_length):
        reason = FinishReason.LENGTH
    if reason is not None and stop is None:
        delta += request.stop_text.add(request.decoder.flush())[0] + request.stop_text.flush()
    step = inspection.step(request.id, index, position, delta, piece(token), request.params, forced=forced, phase=phase)
    if inspection.grammar is not None:
        request.grammar_stats = (request.grammar_stats or NO_GRAMMAR_STATS).plus(index, inspection.grammar)
    return step, reason, stop


def finished_event(
    request: Request, reason: FinishReason, stop: str | None = None, error: str | None = None
) -> Finished:
    decode_seconds = time.perf_counter() - request.first_token_at if request.first_token_at else 0.0
    prefilled = max(0, request.prefilled - request.reused)
    return Finished(
        request_id=request.id,
        finish_reason=reason,
        prompt_tokens=len(request.prompt),
        generated_tokens=len(request.generated),
        prefilled_tokens=prefilled,
        prompt_tps=rate(prefilled, request.prefill_seconds),
        generation_tps=rate(max(0, len(request.generated) - 1), decode_seconds),
        text=request.stop_text.text,
        stop=stop,
        error=error,
        draft=request.draft_stats,
        grammar=request.grammar_stats,
    )
