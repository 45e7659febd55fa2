"""A tokenizer's vocabulary strings as the bytes they stand for (no MLX, no network): what a
server's ``logprobs`` carry as ``bytes``, read from a server's reply (``engine.remote.wire``)
and written by Logitscope's own server (``engine.session.session.EngineSession.token_bytes``)."""

from __future__ import annotations

import re


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: printable stand-in character -> byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


_BYTE_OF = _bytes_to_unicode()
_SPM_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def vocab_piece_bytes(piece: str) -> bytes:
    """A raw vocabulary string (``convert_ids_to_tokens``) as bytes: GPT-2 byte-level when
    every character is in its alphabet, else SentencePiece (``▁`` is a space)."""
    m = _SPM_BYTE.match(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    if "▁" not in piece and all(c in _BYTE_OF for c in piece):
        return bytes(_BYTE_OF[c] for c in piece)
    return piece.replace("▁", " ").encode("utf-8")
