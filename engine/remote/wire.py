"""Reading what an OpenAI-compatible server sends: SSE lines, logprobs in the chat and the
legacy completions shapes, and the server's error messages.

A token's text comes from what the server sent, in this order: the chunk's own text
when the chunk carries one token; else each token's ``bytes`` (vLLM, llama.cpp, SGLang)
or its ``token`` string, decoded incrementally so a character split across tokens comes
out whole. mlx_lm.server sends raw vocabulary strings (``Ġthe``), mapped back to bytes
with the GPT-2 byte-level table (or SentencePiece's ``▁`` and ``<0xNN>``). The texts are
then laid along the server's text: a token whose text the server did not send (an end
token, a stop string) gets ``""``, so the tokens' texts always add up to the server's.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.api.errors import EngineError
from engine.api.vocab_bytes import vocab_piece_bytes
from engine.remote.servers import finite_logprob


class RemoteError(EngineError):
    """A server could not be reached, refused a request, or sent something unusable.
    ``status`` is the HTTP status (None when there was no answer); ``server_message`` is
    the server's own words, when it sent any."""

    def __init__(self, message: str, *, status: int | None = None, server_message: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.server_message = server_message


@dataclass(frozen=True, slots=True)
class WireAlt:
    token_id: int | None
    """None when the server does not send ids."""
    text: str
    logprob: float
    raw: bytes = b""


@dataclass(slots=True)
class WireEntry:
    """One generated token as the server described it, before texts are assigned."""

    token_id: int | None
    """None when the server does not send ids."""
    raw: bytes
    """The token's bytes as well as they can be read from the server's data."""
    logprob: float
    top: tuple[WireAlt, ...]


@dataclass(frozen=True, slots=True)
class WireToken:
    token_id: int | None
    """None when the server does not send ids."""
    text: str
    """The delta to append to the reply (see the module docstring)."""
    piece: str
    logprob: float
    top: tuple[WireAlt, ...]


@dataclass(slots=True)
class WireChunk:
    entries: list[WireEntry] = field(default_factory=list)
    text: str = ""
    reasoning: str = ""
    """The thinking's text the server parsed out of the reply (``reasoning_content``:
    vLLM, SGLang, llama.cpp; ``reasoning``: mlx_lm.server, newer vLLM)."""
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    has_logprobs: bool = False
    cut: tuple[int | None, ...] = ()
    """The ids of the tokens a piece generated past those it keeps (``engine.remote.pieces``):
    mlx_lm.server holds all of them as a prompt-cache key (``engine.remote.resume``)."""


def _token_id(entry: Mapping[str, Any]) -> int | None:
    """The entry's token id, None when the server did not send one (or sent no usable one)."""
    value = entry.get("id")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    token = entry.get("token")
    if isinstance(token, str) and token.startswith("token_id:"):  # vLLM's return_tokens_as_token_ids
        try:
            value = int(token[9:])
        except ValueError:
            return None
        return value if value >= 0 else None
    return None


def _logprob(entry: Mapping[str, Any]) -> float:
    if "logprob" in entry:
        return finite_logprob(entry["logprob"])
    if "prob" in entry and entry["prob"] is not None:  # llama.cpp with post_sampling_probs
        p = float(entry["prob"])
        return math.log(p) if p > 0 else -math.inf
    return math.nan


def _raw_bytes(entry: Mapping[str, Any], vocab_pieces: bool) -> bytes:
    data = entry.get("bytes")
    if isinstance(data, list) and all(isinstance(b, int) for b in data):
        return bytes(b & 0xFF for b in data)
    token = entry.get("token")
    if not isinstance(token, str) or token.startswith("token_id:"):
        return b""
    return vocab_piece_bytes(token) if vocab_pieces else token.encode("utf-8")


def _alts(items: Any, vocab_pieces: bool) -> tuple[WireAlt, ...]:
    out = []
    for alt in items or []:
        if isinstance(alt, Mapping):
            raw = _raw_bytes(alt, vocab_pieces)
            out.append(WireAlt(_token_id(alt), raw.decode("utf-8", "replace"), _logprob(alt), raw))
    return tuple(out)


def parse_chunk(obj: Mapping[str, Any], vocab_pieces: bool = False) -> WireChunk:
    """One streamed chunk or one whole response (chat or completions, first choice)."""
    chunk = WireChunk(usage=obj.get("usage") if isinstance(obj.get("usage"), Mapping) else None)
    choices = obj.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return chunk
    choice = choices[0]
    chunk.finish_reason = choice.get("finish_reason")
    message = choice.get("delta") or choice.get("message")
    if isinstance(message, Mapping):
        chunk.text = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        chunk.reasoning = reasoning if isinstance(reasoning, str) else ""
    else:
        chunk.text = choice.get("text") or ""
    lp = choice.get("logprobs")
    if isinstance(lp, Mapping) and isinstance(lp.get("content"), list):
        chunk.has_logprobs = True
        for e in lp["content"]:
            if isinstance(e, Mapping) and e:
                top = _alts(e.get("top_logprobs") or e.get("top_probs"), vocab_pieces)
                chunk.entries.append(WireEntry(_token_id(e), _raw_bytes(e, vocab_pieces), _logprob(e), top))
    elif isinstance(lp, Mapping) and isinstance(lp.get("tokens"), list):  # legacy completions
        chunk.has_logprobs = True
        tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
        for token, value, top in zip(lp["tokens"], lp.get("token_logprobs") or [], tops, strict=False):
            alts = tuple(
                WireAlt(_token_id({"token": t}), "" if t.startswith("token_id:") else t, finite_logprob(v), b"")
                for t, v in (top or {}).items()
            )
            entry = {"token": token}
            chunk.entries.append(WireEntry(_token_id(entry), _raw_bytes(entry, False), finite_logprob(value), alts))
    return chunk


class TextDecoder:
    """Token bytes to text for one reply, a character split across tokens kept whole."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def __call__(self, raw: bytes) -> str:
        return self._decoder.decode(raw)


def assign_texts(entries: Sequence[WireEntry], server_text: str, decoder: TextDecoder) -> list[WireToken]:
    """Each token's delta, laid along ``server_text`` (the module docstring says how)."""
    decoded = [decoder(e.raw) for e in entries]  # in order: the decoder holds a split character
    if len(entries) == 1:
        texts = [decoded[0] if _dropped_space(decoded[0], server_text) else server_text]
    else:
        # The tokens keep a leading space the server's text dropped (as the local engine's
        # do), so that the reply continued from their texts is the one the tokens spell.
        full = (" " if _dropped_space("".join(decoded), server_text) else "") + server_text
        texts, pos = [], 0
        for t in decoded:
            if t and full.startswith(t, pos):
                texts.append(t)
                pos += len(t)
            else:
                texts.append("")
        if texts and pos < len(full):
            texts[-1] += full[pos:]
    return [
        WireToken(e.token_id, t, e.raw.decode("utf-8", "replace"), e.logprob, e.top)
        for e, t in zip(entries, texts, strict=True)
    ]


def _dropped_space(tokens_text: str, server_text: str) -> bool:
    """Whether ``server_text`` is ``tokens_text`` less its first space: mlx-lm's detokenizer
    drops the first space of each answer (``trim_space``), a lone space token included."""

    def agree(a: str, b: str) -> bool:
        n = min(len(a), len(b))
        return a[:n] == b[:n]

    if not server_text:  # a lone space, the answer's only text: held, then dropped
        return tokens_text == " "
    return tokens_text.startswith(" ") and agree(tokens_text[1:], server_text) and not agree(tokens_text, server_text)


def server_message(body: bytes) -> str:
    """The server's own words from an error body (OpenAI, FastAPI, mlx_lm or plain text)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(data, Mapping):
        for key in ("error", "message", "detail"):
            value = data.get(key)
            if isinstance(value, Mapping):
                value = value.get("message") or value.get("msg") or json.dumps(value)
            if isinstance(value, list) and value:
                value = "; ".join(str(v.get("msg", v)) if isinstance(v, Mapping) else str(v) for v in value)
            if value:
                return str(value)[:500]
    return text[:500]


def sse_data(line: str) -> str | None:
    """The payload of an SSE ``data:`` line, None for any other line."""
    if line.startswith("data:"):
        return line[5:].strip()
    return None


_KEEPALIVE = re.compile(r"^:\s*keepalive\s+(\d+)/(\d+)")


def keepalive_progress(line: str) -> tuple[int, int] | None:
    """mlx_lm.server's prefill progress comment (``: keepalive 12/40``), if this is one."""
    m = _KEEPALIVE.match(line)
    return (int(m.group(1)), int(m.group(2))) if m else None
