"""What the engine emits: plain frozen dataclasses, safe to hand to any thread."""

from __future__ import annotations

from dataclasses import dataclass

from engine.params import SamplingParams


@dataclass(frozen=True, slots=True)
class Candidate:
    """One token of a step's candidate set, with its value in every named distribution."""

    token_id: int
    text: str
    raw_logit: float
    raw_logprob: float
    penalized_logprob: float
    logprob: float
    """In ``final``; -inf when truncation removed the token."""
    bias: float
    """logit_bias added to this token's logit."""
    penalty: float
    """Change of the logit made by the penalties (after the bias)."""
    count: int
    """Occurrences inside the penalty window."""


@dataclass(frozen=True, slots=True)
class TokenStep:
    """One generated token of one request."""

    request_id: int
    index: int
    """Position in the generated output, from 0."""
    position: int
    """Position in the whole context (prompt + output)."""
    token_id: int
    text: str
    """Streaming-detokenized delta to append to the output (held back while it may
    be the start of a stop string)."""
    piece: str
    """This token's own text, for labels."""
    raw_logprob: float
    penalized_logprob: float
    logprob: float
    entropy_raw: float
    entropy: float
    top: tuple[Candidate, ...]
    params: SamplingParams
    forced: bool = False
    """True when the token was chosen by ``branch`` rather than drawn."""

    @property
    def raw_argmax(self) -> bool:
        """Whether the chosen token was the most likely one under ``raw``."""
        best = max(self.top, key=lambda c: c.raw_logit, default=None)
        return best is None or best.token_id == self.token_id


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    request_id: int
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class Finished:
    request_id: int
    finish_reason: str
    """"stop" (EOS or stop string), "length" (max_tokens or context end) or "cancelled"."""
    prompt_tokens: int
    generated_tokens: int
    prefilled_tokens: int
    """Prompt tokens actually run through the model (the rest came from a reused cache)."""
    prompt_tps: float
    generation_tps: float
    text: str
    stop: str | None = None


Event = TokenStep | PrefillProgress | Finished
