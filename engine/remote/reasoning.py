"""A server's reasoning as token phases: what it sent as ``reasoning_content`` /
``reasoning`` is thinking, what it sent as ``content`` the answer.

The server parsed the reply with its own reasoning parser (vLLM's, SGLang's, llama.cpp's,
mlx_lm.server's state machine); its tokens come in the same chunk as that text, one token a
chunk when streamed, all of them in mlx_lm.server's one non-streamed answer. A chunk with
only reasoning is thinking, with only content answer; a chunk with neither (the end
marker, which the parsers drop) keeps the phase before it; a chunk with both (mlx_lm.server's
whole reply) is split where its content starts among its tokens' texts (the answer ends
the reply). A reply whose server sent no reasoning has no phase, as a local model without
markers. Each token's text is laid along the text of its own phase.
"""

from __future__ import annotations

from engine.api.reasoning import ANSWER, THINKING
from engine.remote.events import RemoteRequest
from engine.remote.wire import WireChunk, WireEntry, WireToken, assign_texts


def phased_tokens(chunk: WireChunk, req: RemoteRequest) -> list[tuple[WireToken, str | None]]:
    """The chunk's tokens with their phases; moves ``req.phase`` to the last one's."""
    if not chunk.reasoning and req.phase is None:  # no reasoning (yet): no phases
        return [(t, None) for t in assign_texts(chunk.entries, chunk.text, req.decoder)]
    if not chunk.reasoning:
        phase = ANSWER if chunk.text else req.phase
        req.phase = phase
        return [(t, phase) for t in assign_texts(chunk.entries, chunk.text, req.decoder)]
    split = _answer_start(chunk.entries, chunk.text)
    thinking = assign_texts(chunk.entries[:split], chunk.reasoning, req.decoder) if split else []
    answer = assign_texts(chunk.entries[split:], chunk.text, req.decoder) if split < len(chunk.entries) else []
    req.phase = ANSWER if answer else THINKING
    return [(t, THINKING) for t in thinking] + [(t, ANSWER) for t in answer]


def _answer_start(entries: list[WireEntry], content: str) -> int:
    """The first token of the answer: the answer is the reply's end, so the last place its
    text starts among the tokens' texts (the last token where they do not spell it); no
    token when there is no answer text."""
    if not content:
        return len(entries)
    texts = [e.raw.decode("utf-8", "replace") for e in entries]
    whole = "".join(texts)
    at = whole.rfind(content)
    if at < 0:  # a server that trimmed its content
        at = whole.rfind(content.strip())
    if at < 0:  # texts that do not spell it (a server sending ids only): the last token answers,
        return max(len(entries) - 1, 0)  # so the answer's text is kept, not dropped with the thinking
    offset = 0
    for i, text in enumerate(texts):
        if offset + len(text) > at:
            return i
        offset += len(text)
    return len(entries)
