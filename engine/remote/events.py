"""The events of a remote request, holding only what the server reported.

Everything a server does not report is ``None`` (the forced token's logprob, entropies,
survivors, raw logits, bias, penalty, counts, positions, and the token ids it does not
send: such a token is matched by text, :func:`engine.api.events.same_token`); the stage the
numbers describe is ``TokenStep.reported_stage``, also the step's one-element ``chain``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from engine.api.events import Candidate, Finished, FinishReason, TokenStep, same_token
from engine.api.params import SamplingParams
from engine.api.reasoning import THINKING
from engine.remote.wire import RemoteError, TextDecoder, WireToken


@dataclass(frozen=True, slots=True)
class RemoteFinished(Finished):
    """A remote request's end. With ``finish_reason == "error"``, ``error`` is the message
    (as for the local engine) and ``exception`` the :class:`RemoteError` itself."""

    exception: RemoteError | None = None


@dataclass(eq=False)
class RemoteRequest:
    """One request's state, kept on the backend's thread."""

    id: int
    messages: tuple[dict[str, str], ...]
    params: SamplingParams
    prefix: str
    """Reply text the server is to continue (a branch's text, then what came so far)."""
    index: int
    """Output index of the next token."""
    generated: int = 0
    generation: int = 0
    future: Any = None
    decoder: TextDecoder = field(default_factory=TextDecoder)
    started: float = field(default_factory=time.perf_counter)
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    pieces: int = 0
    """Pieces of the reply asked for so far (``engine.remote.pieces``)."""
    whole: str = ""
    """Why the reply was asked for whole ("" when in pieces or streamed)."""
    tokens: list[tuple[int | None, str]] = field(default_factory=list)
    """The reply's (id, text) received, while they spell ``prefix`` (``engine.remote.resume``)."""
    overlap: tuple[tuple[int | None, str], ...] = ()
    """Tokens the next piece repeats first, to be checked and dropped (``engine.remote.resume``)."""
    keys: set[tuple[int | None, ...]] = field(default_factory=set)
    """The reply's ids that each sampled piece left as a prompt-cache key on the server: a
    prompt exactly equal to one kills mlx_lm.server's generation thread (``engine.remote.pieces``)."""
    rest_whole: str = ""
    """Why the rest of a reply begun in pieces is asked for in one request ("" while in
    pieces: ``engine.remote.resume.cut_to_canonical``)."""
    phase: str | None = None
    """The phase of the reply's last token: None until the server sent reasoning
    (``engine.remote.reasoning``)."""


def _reported(logprob: float) -> float | None:
    """The wire's NaN (a logprob the server left out) as an event's None."""
    return None if math.isnan(logprob) else logprob


def _candidate(token_id: int | None, text: str, logprob: float) -> Candidate:
    return Candidate(token_id, text, None, (_reported(logprob),), None, None, None, None)


def token_step(req: RemoteRequest, token: WireToken, stage: str, phase: str | None = None) -> TokenStep:
    """The next token of ``req``; advances its index and text (a thinking token's text is
    the server's reasoning, kept out of the reply's text that a continuation sends)."""
    top = [_candidate(a.token_id, a.text, a.logprob) for a in token.top]
    known = token.token_id is not None or token.piece  # a token with neither: no row to show
    if known and not any(same_token(c.token_id, c.text, token.token_id, token.piece) for c in top):
        top.append(_candidate(token.token_id, token.piece, token.logprob))
    top.sort(key=lambda c: math.inf if c.logprobs[0] is None else -c.logprobs[0])
    step = TokenStep(
        request_id=req.id,
        index=req.index,
        position=None,
        token_id=token.token_id,
        text=token.text,
        piece=token.piece,
        chain=(stage,),
        logprobs=(_reported(token.logprob),),
        entropies=(None,),
        survivors=(None,),
        top=tuple(top[: max(req.params.top_logprobs, 1) + 1]),
        params=req.params,
        reported_stage=stage,
        phase=phase,
    )
    req.index += 1
    req.generated += 1
    if phase != THINKING:
        req.prefix += token.text
    return step


def forced_step(req: RemoteRequest, token_id: int | None, text: str, stage: str) -> TokenStep:
    """A branch's forced token: no distribution (the original step at this index has it);
    ``token_id`` None where the server never reported it (the text is what is sent)."""
    return TokenStep(
        req.id, req.index, None, token_id, text, text, (stage,), (None,), (None,), (None,), (), req.params, True,
        reported_stage=stage,
    )  # fmt: skip


def server_reason(finish: str | None) -> FinishReason:
    """A server's ``finish_reason`` as ours: ``length`` is ``LENGTH``; every other end the
    server chose (``stop``, ``eos``, ``tool_calls``, ``content_filter``, none given) is ``STOP``."""
    return FinishReason.LENGTH if finish == "length" else FinishReason.STOP


def finished(req: RemoteRequest, reason: FinishReason, error: RemoteError | None = None) -> RemoteFinished:
    elapsed = max(time.perf_counter() - req.started, 1e-9)
    return RemoteFinished(
        request_id=req.id,
        finish_reason=reason,
        prompt_tokens=req.prompt_tokens,
        generated_tokens=req.generated,
        prefilled_tokens=req.prompt_tokens - req.cached_tokens if req.cached_tokens is not None else None,
        prompt_tps=None,
        generation_tps=req.generated / elapsed,
        text=req.prefix,
        error=None if error is None else error_words(req, error),
        exception=error,
    )


def error_words(req: RemoteRequest, error: RemoteError) -> str:
    """The error, and what of the reply it left: the tokens received are kept; a reply
    asked for whole (nothing received before its end) says why it was."""
    words = str(error)
    n = req.generated
    if n:
        kept = "it is" if n == 1 else f"all {n} are"
        words += f" The reply was cut after {n} token{'s' if n != 1 else ''}: {kept} kept."
    elif req.whole:
        words += f" Nothing was received: the reply was asked for whole ({req.whole})."
    return words


def read_usage(req: RemoteRequest, usage: Any) -> None:
    """The server's ``usage``: the prompt's tokens, and how many its prompt cache held."""
    if usage:
        req.prompt_tokens = int(usage.get("prompt_tokens") or req.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            req.cached_tokens = int(details["cached_tokens"])
