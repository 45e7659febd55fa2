"""TokenText decodes as the tokenizer does, through its Rust tokenizer where that is the same."""

from __future__ import annotations

import copy
import random

from engine.runtime.detokenize import StreamDecoder
from engine.runtime.text import TokenText


def _hf(loaded):
    return loaded.tokenizer._tokenizer  # transformers' tokenizer inside mlx-lm's wrapper


def test_decode_matches_transformers(tiny) -> None:
    hf = _hf(tiny)
    text = TokenText(tiny.tokenizer)
    rnd = random.Random(0)
    for _ in range(2000):
        ids = [rnd.randrange(tiny.vocab_size) for _ in range(rnd.randrange(1, 7))]
        assert text.decode(ids) == hf.decode(ids, skip_special_tokens=False), ids
        assert text.piece(ids[0]) == hf.decode([ids[0]], skip_special_tokens=False)


def test_clean_up_configured_keeps_transformers_decode(tiny) -> None:
    """A tokenizer that cleans up spaces after decoding is decoded through transformers."""
    wrapper = copy.copy(tiny.tokenizer)
    hf = copy.copy(_hf(tiny))
    hf.clean_up_tokenization_spaces = True
    wrapper._tokenizer = hf
    calls = []
    original = hf.decode
    hf.decode = lambda ids, **kw: calls.append(ids) or original(ids, **kw)
    text = TokenText(wrapper)
    assert text.decode([5, 6, 7]) == original([5, 6, 7], skip_special_tokens=False)
    assert calls == [[5, 6, 7]]


def test_stream_decoder_releases_the_whole_text(tiny) -> None:
    text = TokenText(tiny.tokenizer)
    rnd = random.Random(1)
    for _ in range(200):
        ids = [rnd.randrange(tiny.vocab_size) for _ in range(rnd.randrange(1, 20))]
        decoder = StreamDecoder(text.decode)
        released = "".join(decoder.add(t) for t in ids) + decoder.flush()
        assert released == _hf(tiny).decode(ids, skip_special_tokens=False)
