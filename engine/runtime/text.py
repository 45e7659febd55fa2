"""Token ids to text, for the streaming output and for candidate labels."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any


class TokenText:
    """Wraps a tokenizer's decode; special tokens are kept (this is an inspector)."""

    def __init__(self, tokenizer: Any) -> None:
        inner = getattr(tokenizer, "_tokenizer", tokenizer)
        self._decode_fn = inner.decode
        self.piece = lru_cache(maxsize=65536)(self._piece)

    def decode(self, tokens: Sequence[int]) -> str:
        return self._decode_fn(list(tokens), skip_special_tokens=False)

    def _piece(self, token_id: int) -> str:
        return self.decode([token_id])
