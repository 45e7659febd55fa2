"""What the engine emits: plain frozen dataclasses, safe to hand to any thread."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engine.api.draft import DraftRecord, DraftStats
from engine.api.grammar import GrammarRecord, GrammarStats
from engine.api.params import SamplingParams

UNKNOWN_COUNT = -1
"""What the codec's version-2 records (and older app versions) wrote for a count that is
not known. Events hold ``None`` for it; the codec reads -1 back as ``None``."""

UNREPORTED_TOKEN_ID = -1
"""What records before the codec's version 4 (and older app versions) wrote for a token id
a server did not report. Events hold ``None`` for it; the codec reads -1 back as ``None``."""


class FinishReason(str, Enum):
    """Why a reply ended. A ``str`` so that JSON, SQLite and comparisons with the plain
    strings (``"stop"``, ...) see the value itself, as they did before the enum."""

    STOP = "stop"
    """An EOS token of the model or a stop string (named in ``Finished.stop``)."""
    LENGTH = "length"
    """``max_tokens`` reached, or the end of the model's context."""
    CANCELLED = "cancelled"
    ERROR = "error"
    """A decode step failed; ``Finished.error`` says why, the tokens before it stand."""
    SCORED = "scored"
    """The app's saved branch of a scored text (the engine never ends a reply so)."""
    INTERRUPTED = "interrupted"
    """The app's saved branch of a reply the app stopped in the middle of (a crash)."""

    def __str__(self) -> str:
        # Python 3.11 formats a (str, Enum) member as "FinishReason.STOP"; labels want the value.
        return self.value


@dataclass(frozen=True, slots=True)
class Candidate:
    """One token of a step's candidate set, with its logprob after every stage of the chain."""

    token_id: int | None
    """None: not reported (a server that sends a token's text without its id); the local
    engine always has it."""
    text: str
    raw_logit: float | None
    """None: not reported (a server sends no logits)."""
    logprobs: tuple[float | None, ...]
    """Logprob after each stage of the step's ``chain`` (same order); -inf once removed;
    None where a server left it out."""
    removed_by: str | None
    """The stage that removed this token, or None if it survived the whole chain."""
    bias: float | None
    """logit_bias added to this token's logit; None: not reported."""
    penalty: float | None
    """Change of the logit made by the ``penalties`` stage; None: not reported."""
    count: int | None
    """Occurrences inside the penalty window; None: not reported."""
    dry: float | None = None
    """Change of the logit made by the ``dry`` stage; None where DRY did not run, and where
    it was not reported (a server) or not recorded (a step saved before candidates held it)."""

    @property
    def raw_logprob(self) -> float | None:
        return self.logprobs[0]

    @property
    def logprob(self) -> float | None:
        """After the last stage of the chain; -inf when a stage removed the token."""
        return self.logprobs[-1]


class ChainValues:
    """The first and last of a step's per-stage values (``logprobs`` and ``entropies``
    aligned with ``chain``): ``raw`` and the distribution the token was drawn from.
    ``None`` where a server did not report the value."""

    __slots__ = ()
    logprobs: tuple[float | None, ...]
    entropies: tuple[float | None, ...]

    @property
    def raw_logprob(self) -> float | None:
        """The first stage's (``raw`` locally; a server's one stage: see ``reported_stage``)."""
        return self.logprobs[0]

    @property
    def logprob(self) -> float | None:
        """The chosen token's logprob after the last stage."""
        return self.logprobs[-1]

    @property
    def entropy_raw(self) -> float | None:
        return self.entropies[0]

    @property
    def entropy(self) -> float | None:
        """Entropy after the last stage."""
        return self.entropies[-1]


@dataclass(frozen=True, slots=True)
class TokenStep(ChainValues):
    """One generated (or scored) token of one request."""

    request_id: int
    index: int
    """Position in the generated output, from 0."""
    position: int | None
    """Position in the whole context (prompt + output); None: not reported (a server)."""
    token_id: int | None
    """None: not reported (a server that sends a token's text without its id: the step's
    token is then told apart from its candidates by text, :func:`same_token`); the local
    engine always has it."""
    text: str
    """Streaming-detokenized delta to append to the output (held back while it may
    be the start of a stop string)."""
    piece: str
    """This token's own text, for labels."""
    chain: tuple[str, ...]
    """The stages that ran for this row, in order, starting with ``raw``."""
    logprobs: tuple[float | None, ...]
    """The chosen token's logprob after each stage of ``chain``; None: not reported (a
    server's forced token)."""
    entropies: tuple[float | None, ...]
    """Entropy in nats of the distribution after each stage of ``chain``; None: not reported."""
    survivors: tuple[int | None, ...]
    """Tokens left with a non-zero probability after each stage of ``chain``; None: not known."""
    top: tuple[Candidate, ...]
    params: SamplingParams
    forced: bool = False
    """True when the token was chosen by ``branch`` (or given by a scored text) rather than drawn."""
    rank: int | None = None
    """The token's rank under ``raw`` (1 = most likely); set for scored texts."""
    reported_stage: str | None = None
    """None when the step holds the whole chain (the local engine). Else the numbers are
    what a server reported, and this names the one stage they describe (``raw``,
    ``penalties``, ``top_p``, ...; also ``chain[0]``): views label them by this name,
    never as ``raw``."""
    phase: str | None = None
    """``"thinking"`` or ``"answer"`` for a reasoning model's token (``engine.api.reasoning``:
    the end-of-thinking marker is thinking, the answer starts after it); None for a model
    without reasoning markers."""
    draft: DraftRecord | None = None
    """What a draft model proposed at this token (speculative decoding); None: no draft."""
    grammar: GrammarRecord | None = None
    """What the grammar did at this token (structured output); None: no grammar ran."""

    def stage_index(self, stage: str) -> int | None:
        """Where ``stage`` sits in this step's chain, or None if it did not run."""
        return self.chain.index(stage) if stage in self.chain else None

    def logprob_at(self, stage: str, candidate: Candidate | None = None) -> float | None:
        """The chosen token's (or ``candidate``'s) logprob after ``stage``; None if it did not
        run or was not reported."""
        i = self.stage_index(stage)
        if i is None:
            return None
        return (candidate.logprobs if candidate is not None else self.logprobs)[i]

    @property
    def raw_argmax(self) -> bool:
        """Whether the chosen token was the most likely one under ``raw``."""
        known = [c for c in self.top if c.raw_logit is not None]
        best = max(known, key=lambda c: c.raw_logit or 0.0, default=None)
        return best is None or best.token_id == self.token_id


def same_token(a_id: int | None, a_text: str, b_id: int | None, b_text: str) -> bool:
    """Whether two tokens are the same: by id where either has one, else (a server that
    sends no ids) by text."""
    if a_id is not None or b_id is not None:
        return a_id == b_id
    return a_text == b_text


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    request_id: int
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class Finished:
    request_id: int
    finish_reason: FinishReason
    """``STOP``, ``LENGTH``, ``CANCELLED`` or ``ERROR``."""
    prompt_tokens: int
    generated_tokens: int
    prefilled_tokens: int | None
    """Prompt tokens actually run through the model (the rest came from a reused cache);
    None: not reported (a server that does not say what it cached)."""
    prompt_tps: float | None
    """None: not reported (a server)."""
    generation_tps: float
    text: str
    stop: str | None = None
    error: str | None = None
    """With ``finish_reason == "error"``: what went wrong (the tokens before it stay valid)."""
    draft: DraftStats | None = None
    """The reply's speculative decoding, summed; None: it had no draft model."""
    grammar: GrammarStats | None = None
    """The reply's structured output, summed; None: no grammar ran."""


@dataclass(frozen=True, slots=True)
class Divergence:
    """One step of a fork group: how far each pair of its live variants has drifted apart."""

    group: int
    """The group's id (that of its first request)."""
    index: int
    """The output index of this step's tokens."""
    pairs: tuple[tuple[int, int], ...]
    """Request id pairs (a, b), a < b."""
    js: tuple[float, ...]
    """Jensen–Shannon divergence (nats) of each pair's final distributions at ``index``."""
    first_difference: tuple[int | None, ...]
    """For each pair, the first output index where their drawn tokens differ, or None yet."""


@dataclass(frozen=True, slots=True)
class ScoreDone:
    """The end of a scored text (``python -m engine score``, the app's Score text)."""

    request_id: int
    tokens: int
    """Tokens scored (every token of the text after its context)."""
    perplexity: float
    """exp of the mean negative raw logprob."""
    mean_surprisal_bits: float
    tokens_per_second: float
    grammar: GrammarStats | None = None
    """Where the text stands under the grammar it was scored with (``left_at``: the first
    token it forbids); None: no grammar."""
    cached_tokens: int = 0
    """Tokens of the text whose caches (and scored steps) came from a text scored before it
    (``engine.analysis.scored_texts``: a served ``echo`` sharing its beginning); 0: all computed."""


Event = TokenStep | PrefillProgress | Finished | Divergence | ScoreDone
