"""Token ids to text, for the streaming output and for candidate labels."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any


class TokenText:
    """Wraps a tokenizer's decode; special tokens are kept (this is an inspector).

    Every step decodes, so where transformers' fast tokenizer would only hand the ids to
    its Rust ``tokenizers.Tokenizer`` (no clean-up of the spaces configured), that one is
    called directly: the same text without transformers' Python layers around it (about
    a tenth of a host-bound step's time).
    """

    def __init__(self, tokenizer: Any) -> None:
        inner = getattr(tokenizer, "_tokenizer", tokenizer)
        rust = getattr(inner, "_tokenizer", None)
        direct = rust is not None and callable(getattr(rust, "decode", None))
        if direct and getattr(inner, "clean_up_tokenization_spaces", True) is False:
            self._decode_fn = rust.decode
        else:
            self._decode_fn = inner.decode
        self.piece = lru_cache(maxsize=65536)(self._piece)

    def decode(self, tokens: Sequence[int]) -> str:
        # One token is its cached piece: the streaming decoder's every other call.
        if len(tokens) == 1:
            return self.piece(tokens[0])
        return self._decode_fn(list(tokens), skip_special_tokens=False)

    def _piece(self, token_id: int) -> str:
        return self._decode_fn([token_id], skip_special_tokens=False)
