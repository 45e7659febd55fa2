"""Where a greedy reply in pieces can be continued token for token.

A piece continues the reply as text (``/v1/completions`` takes a string and encodes it), so
the server sees the tokenizer's own split of that text. Where the model wrote a split of
its own (SmolLM2 writes ``"\\n\\n"`` as two ``"\\n"`` tokens, which the text encodes as one)
the continuation would be conditioned on other tokens than the reply's, and a greedy reply
could differ from the server's own whole reply. So, for a greedy reply whose tokenizer is
read here (after the rendered chat, or the plain prompt of ``/v1/completions``), the next
piece continues from the longest start of the reply whose text encodes to exactly its
tokens, and asks the server again for the tokens after it (the *overlap*): greedy, they
come back the same and are dropped; more than ``MAX_OVERLAP`` and the rest of the reply is
asked for in one request (no piece would stream any more). A sampled piece is cut there
instead (:func:`cut_to_canonical`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.remote.events import RemoteRequest
from engine.remote.wire import TextDecoder, WireChunk, WireToken

MAX_OVERLAP = 64


def canonical_prefix(tok: Any, base: str, tokens: Sequence[tuple[int | None, str]]) -> int:
    """How many of the reply's ``tokens`` (id, text) the text ``base + their texts`` encodes
    to exactly (``base``: the rendered chat); all of them where ids are missing."""
    ids = [t for t, _ in tokens]
    if not tokens or any(t is None for t in ids):
        return len(tokens)
    texts = [x for _, x in tokens]
    start = tok(base)["input_ids"]

    def encodes(j: int) -> list[int]:
        return tok(base + "".join(texts[:j]))["input_ids"]

    got = encodes(len(tokens))
    want = start + ids
    if got == want:
        return len(tokens)
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    j = max(0, min(len(tokens), first - len(start)))
    while j > 0 and encodes(j) != start + ids[:j]:
        j -= 1
    return j


def drop_overlap(chunk: WireChunk, overlap: Sequence[tuple[int | None, str]]) -> bool:
    """Drop the repeated ``overlap`` from the start of a piece's answer; False when the
    server's tokens there are not the reply's (the reply then cannot go on unchanged)."""
    n = len(overlap)
    head = chunk.entries[:n]
    if len(head) < n or any(e.token_id != t for e, (t, _) in zip(head, overlap, strict=True)):
        return False
    del chunk.entries[:n]
    text = "".join(x for _, x in overlap)
    for repeated in (text, text.lstrip(" ")):  # mlx-lm's detokenizer drops a reply's leading space
        if chunk.text.startswith(repeated):
            chunk.text = chunk.text[len(repeated) :]
            break
    return True


def resume_body(
    body: Callable[[RemoteRequest], tuple[str, dict[str, Any]]], req: RemoteRequest
) -> tuple[str, dict[str, Any]]:
    """The request continuing from the reply's start before ``req.overlap``, which the
    server is asked for again (``body``: the request writer's, which imports this module)."""
    full, index = req.prefix, req.index
    cut = len("".join(x for _, x in req.overlap))
    req.prefix, req.index = full[: len(full) - cut], index - len(req.overlap)
    try:
        return body(req)
    finally:
        req.prefix, req.index = full, index


def cut_to_canonical(
    req: RemoteRequest,
    chunk: WireChunk,
    tokens: list[tuple[WireToken, str | None]],
    canonical: Callable[[RemoteRequest, Sequence[tuple[int | None, str]]], int | None],
) -> list[tuple[WireToken, str | None]]:
    """A sampled piece's ``tokens`` up to where the reply's text still encodes to exactly
    its tokens, the rest dropped before anyone sees them, so the next piece continues from
    the reply's own tokens (a drawn token cannot be asked for again, as a greedy overlap
    is: dropped, it is drawn anew, from the same distribution). A token whose id the server
    did not name cannot be checked: the piece stops before it. Where not one token more can
    be kept, nothing is, and the rest of the reply is asked for in one request
    (``req.rest_whole`` says why). A cut never ends the reply on ids the server holds as a
    prompt-cache key (``req.keys``: such a prompt would leave it nothing to prefill).
    ``canonical``: the request writer's."""
    before = [t for t, _ in req.tokens]
    req.keys.add(tuple(before + [t.token_id for t, _ in tokens] + list(chunk.cut)))
    if any(phase is not None for _, phase in tokens) or "".join(x for _, x in req.tokens) != req.prefix:
        return tokens  # a reasoning reply is asked for whole: no later piece
    received = req.tokens + [(t.token_id, t.text) for t, _ in tokens]
    named = next((i for i, (t, _) in enumerate(received) if t is None), len(received))
    if named < len(req.tokens):
        return tokens  # a branch's forced text without ids: it cannot be told
    j = canonical(req, received[:named])
    if j is None or (j == len(received) and tuple(t for t, _ in received) not in req.keys):
        return tokens
    kept = max(0, j - len(req.tokens))
    while kept > 0 and tuple(t for t, _ in received[: len(req.tokens) + kept]) in req.keys:
        kept -= 1
    req.decoder = TextDecoder()  # a text that encodes to its tokens holds no split character
    if kept == 0:
        req.rest_whole = (
            f"the reply from token {req.index} could not be continued from a text that encodes "
            "back to the tokens drawn, and a drawn token cannot be asked for again"
        )
    return tokens[:kept]
