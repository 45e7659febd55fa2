"""Speculative decoding, as a reply reports it (MLX-free: the app, the store and the CLI read it).

A draft model proposes a block of tokens and the target checks them all in one forward
pass. The scheme (``engine.runtime.speculative``) is mlx-lm's: at each position the target
draws its own token exactly as it would without a draft (same chain, same seeded noise),
and a draft token is accepted while it equals that draw. The reply is therefore the
target's own, token for token, greedy or seeded; the draft only decides how many tokens
one target pass yields. Each token records what the draft proposed there and what
became of it.

The rule is a coupling, not rejection sampling: where a row samples, the draft and the
target each draw ``argmax(log prob + g)`` with the same Gumbel noise ``g`` (the request's
seed and the token's index), and the proposal is kept only when both draws are the same
token. That keeps the target's distribution exactly and accepts less often than classic
speculative sampling's min(1, p/q), which is recorded beside it under its own name
(:func:`classic_accept_probability`), never as the rule in use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.api.errors import EngineError


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    """The draft's token equalled the target's draw."""
    REJECTED = "rejected"
    """The draft proposed another token; the target's own draw was kept."""
    BONUS = "bonus"
    """Every draft token of the block was accepted: the target's pass gave one more."""


OUTCOMES = tuple(o.value for o in Outcome)


class Coupling(StrEnum):
    """How the draft's draw and the target's were made at a token: what decided it."""

    GREEDY = "greedy"
    """Both models took their most likely token (after their chains)."""
    SHARED_NOISE = "shared_noise"
    """Each model drew ``argmax(log prob + g)`` with the same Gumbel noise ``g`` of the
    request's seed and the token's index: the noise's winner under each distribution."""


COUPLINGS = tuple(c.value for c in Coupling)


def classic_accept_probability(p: float | None, q: float | None) -> float | None:
    """min(1, p / q) for probabilities ``p`` (the target's) and ``q`` (the draft's): the
    chance classic speculative sampling (Leviathan et al., 2023) would keep the proposal.
    Not the rule this engine uses (:class:`Coupling`); None where either is not known."""
    if p is None or q is None or q <= 0:
        return None
    return min(1.0, p / q)


DEFAULT_DRAFT_TOKENS = 3
MAX_DRAFT_TOKENS = 16


def check_draft_tokens(tokens: object) -> int:
    """How many tokens a draft block proposes, or an EngineError saying what is wrong."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_DRAFT_TOKENS:
        raise EngineError(f"the number of draft tokens must be an integer in [1, {MAX_DRAFT_TOKENS}], got {tokens!r}.")
    return tokens


@dataclass(frozen=True, slots=True)
class DraftCandidate:
    token_id: int
    text: str
    logprob: float
    """Under the draft's distribution after its chain (the one it drew from)."""
    target_logprob: float | None
    """Under the target's distribution after its chain at the same position; None: not known."""


@dataclass(frozen=True, slots=True)
class DraftRecord:
    """What the draft did at one output token."""

    outcome: Outcome
    position: int
    """The token's place in its draft block, from 0 (a bonus token's is the block's size)."""
    block: int
    """How many tokens the draft proposed in this block."""
    token_id: int | None
    """The draft's proposal here; None for a bonus token (nothing was proposed)."""
    logprob: float | None
    """log q: the proposal under the draft's distribution."""
    target_logprob: float | None
    """log p: the proposal under the target's distribution."""
    top: tuple[DraftCandidate, ...] = ()
    """The draft's top candidates, most likely first."""
    drawn_token_id: int | None = None
    """The target's own draw here (the token the reply kept); None: not recorded (an
    older record)."""
    coupling: Coupling | None = None
    """How both draws were made (:class:`Coupling`); None: not recorded (an older record)."""

    @property
    def kept(self) -> bool:
        """Whether the draft's proposal became the reply's token (the two draws agreed)."""
        return self.outcome is Outcome.ACCEPTED

    @property
    def classic_accept_probability(self) -> float | None:
        """min(1, p / q) of the proposal: what classic speculative sampling would keep it
        with (:func:`classic_accept_probability`), not the rule used here."""
        if self.logprob is None or self.target_logprob is None:
            return None
        return classic_accept_probability(math.exp(self.target_logprob), math.exp(self.logprob))


@dataclass(frozen=True, slots=True)
class DraftStats:
    """A reply's speculative decoding, summed (the CLI's ``done`` record, the app's status)."""

    proposed: int
    """Draft tokens checked by the target."""
    accepted: int
    passes: int
    """Target forward passes that checked a block."""
    tokens: int
    """Tokens those passes gave."""

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    @property
    def mean_accepted(self) -> float | None:
        """Accepted draft tokens per block."""
        return self.accepted / self.passes if self.passes else None

    @property
    def tokens_per_pass(self) -> float | None:
        return self.tokens / self.passes if self.passes else None

    def plus(self, proposed: int, accepted: int, tokens: int) -> DraftStats:
        return DraftStats(self.proposed + proposed, self.accepted + accepted, self.passes + 1, self.tokens + tokens)


NO_DRAFT_STATS = DraftStats(0, 0, 0, 0)


# The token record's "draft" object (engine.api.codec) ------------------------------------


def encode_draft(record: DraftRecord, number: Callable[[float | None], float | None]) -> dict[str, Any]:
    """``number``: the codec style's rounding (a value that is not finite becomes null)."""
    return {
        "outcome": record.outcome.value,
        "position": record.position,
        "block": record.block,
        "token_id": record.token_id,
        "drawn_token_id": record.drawn_token_id,
        "coupling": None if record.coupling is None else record.coupling.value,
        "logprob": number(record.logprob),
        "target_logprob": number(record.target_logprob),
        "classic_accept_probability": number(record.classic_accept_probability),
        "top": [
            {
                "token_id": c.token_id,
                "text": c.text,
                "logprob": number(c.logprob),
                "target_logprob": number(c.target_logprob),
            }
            for c in record.top
        ],
    }


def decode_draft(data: Mapping[str, Any] | None) -> DraftRecord | None:
    """The record back (``classic_accept_probability`` is derived, not read; an older
    record's ``accept_probability`` was the same figure). A null logprob of the target is
    -inf (a token its chain removed), unless the proposal itself is null."""
    if data is None:
        return None
    outcome = data.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"a draft record's outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}.")
    coupling = data.get("coupling")
    if coupling is not None and coupling not in COUPLINGS:
        raise ValueError(f"a draft record's coupling must be one of {', '.join(COUPLINGS)}, got {coupling!r}.")
    token, drawn = data.get("token_id"), data.get("drawn_token_id")

    def lp(value: Any, known: bool = True) -> float | None:
        return float(value) if value is not None else (-math.inf if known else None)

    return DraftRecord(
        Outcome(outcome),
        int(data["position"]),
        int(data["block"]),
        None if token is None else int(token),
        lp(data.get("logprob"), token is not None),
        lp(data.get("target_logprob"), token is not None),
        tuple(
            DraftCandidate(int(c["token_id"]), str(c["text"]), lp(c.get("logprob")), lp(c.get("target_logprob")))
            for c in data.get("top") or ()
        ),
        None if drawn is None else int(drawn),
        None if coupling is None else Coupling(coupling),
    )


def stats_fields(stats: DraftStats | None) -> dict[str, Any]:
    """The ``done`` record's draft figures (none without a draft)."""
    if stats is None:
        return {}
    return {
        "draft": {
            "proposed": stats.proposed,
            "accepted": stats.accepted,
            "target_passes": stats.passes,
            "acceptance_rate": _round(stats.acceptance_rate),
            "mean_accepted": _round(stats.mean_accepted),
            "tokens_per_pass": _round(stats.tokens_per_pass),
        }
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True, slots=True)
class DraftModel:
    """What the app shows of the draft model proposing to the running one."""

    name: str
    source: str
    precision: str
    tokens: int
    """Tokens proposed per block."""
