"""A reply in pieces, for a server that cannot stream logprobs (mlx_lm.server 0.32).

Such a server sends logprobs only in a whole, non-streamed answer: asked for a whole reply
nothing would show until its end, a reply slower than the timeout would fail with nothing
kept, and a server stopped mid-reply would lose it all. So the reply is asked for a few
tokens at a time, each piece continuing the reply so far (the first through the chat
endpoint, the rest as text through ``/v1/completions``, the chat rendered here by
``engine.remote.template``); the server's prompt cache holds the reply so far, so a piece
prefills one token. The timeout bounds one piece. A piece continues only from a text that
the server's tokenizer encodes back to exactly the tokens received (``engine.remote.resume``),
so a tokenizer must be readable here, for the chat and for plain text alike.
docs/REMOTE.md has the measurements.

Each piece but the last asks for one token more than it keeps (``keep``): mlx_lm.server
0.32.2 stores a finished request's tokens as a prompt-cache key, and a prompt exactly equal
to a key leaves it nothing to prefill, which kills its generation thread ("Sequence has an
empty prompt"). A continuation that stops one token short of the key is a strict prefix
of it, which the cache trims instead.
"""

from __future__ import annotations

from engine.api.params import SamplingParams
from engine.remote.kind import ServerKind
from engine.remote.wire import WireChunk

FIRST_PIECE = 8
"""Tokens of the first piece: small, so that the first token shows soon."""
PIECE = 32
"""Tokens of each later piece: larger, since each piece costs a request (measured)."""
CUT = "piece"
"""The finish reason of a piece the reply continues after."""


def whole_reason(kind: ServerKind, params: SamplingParams, chat: bool, template_problem: str, thinks: bool) -> str:
    """Why a reply under ``params`` is asked for whole ("" when it goes in pieces)."""
    if kind.streams_logprobs:
        return "the server streams its logprobs"
    if params.seed is not None and not params.greedy:
        return "a seeded sampled reply is one request, so that the seed gives the server's own reply"
    if params.has_penalties:
        return (
            f"{kind.title} counts penalties over the tokens a request generates, not those its "
            "prompt cache held: a reply in pieces would be penalized differently"
        )
    if not chat and template_problem:
        return (
            "a piece is continued from the reply's text only where the server's tokenizer "
            f"encodes it back to the tokens received, and {template_problem}"
        )
    if chat and template_problem:
        return f"the model's chat template cannot be rendered here to continue the reply: {template_problem}"
    if chat and thinks:
        return "a reasoning model: its thinking is not sent back as text, so it could not be continued"
    return ""


def keep_first(chunk: WireChunk, keep: int) -> bool:
    """Cut a piece's answer to its first ``keep`` tokens (their text too); True when it was
    cut, i.e. the reply goes on. A piece that stopped by itself is kept whole."""
    if chunk.finish_reason != "length" or len(chunk.entries) <= keep:
        return False
    dropped = b"".join(e.raw for e in chunk.entries[keep:]).decode("utf-8", "replace")
    kept = b"".join(e.raw for e in chunk.entries[:keep]).decode("utf-8", "replace")
    chunk.cut = tuple(e.token_id for e in chunk.entries[keep:])
    del chunk.entries[keep:]
    if dropped and chunk.text.endswith(dropped):
        chunk.text = chunk.text[: -len(dropped)]
    elif chunk.text.startswith(kept) or chunk.text.startswith(kept.lstrip(" ")):
        # mlx-lm's detokenizer drops a reply's leading space and holds back a split character.
        chunk.text = kept if chunk.text.startswith(kept) else kept.lstrip(" ")
    chunk.finish_reason = CUT
    return True
