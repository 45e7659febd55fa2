"""A plain reimplementation of llama.cpp's byte-level BPE tokenizer, for parity tests.

Special (control) tokens are split out first, each text piece goes through the
pre-tokenizer regexes of llama.cpp's ``regex_exprs`` (for ``smollm``: digits
one by one, then the GPT-2 expression), bytes map to GPT-2's printable
alphabet, and merges apply lowest rank first.
"""

from __future__ import annotations

import regex

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def bytes_to_unicode() -> dict[int, str]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars), strict=True))


class ReferenceBPE:
    def __init__(self, tokens: list[str], merges: list[str], types: list[int], digits_first: bool):
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}
        self.specials = sorted((t for t, k in zip(tokens, types, strict=True) if k == 3), key=len, reverse=True)
        self.byte_map = bytes_to_unicode()
        self.digits_first = digits_first

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece, special in self._split_specials(text):
            if special:
                ids.append(self.vocab[piece])
            else:
                for word in self._pretokenize(piece):
                    ids.extend(self._bpe(word))
        return ids

    def _split_specials(self, text: str):
        if not self.specials:
            yield text, False
            return
        pattern = "(" + "|".join(regex.escape(s) for s in self.specials) + ")"
        for i, part in enumerate(regex.split(pattern, text)):
            if part:
                yield part, i % 2 == 1

    def _pretokenize(self, text: str) -> list[str]:
        pieces = [text]
        if self.digits_first:
            pieces = [p for chunk in pieces for p in regex.split(r"(\p{N})", chunk) if p]
        return [w for p in pieces for w in regex.findall(GPT2, p)]

    def _bpe(self, word: str) -> list[int]:
        symbols = ["".join(self.byte_map[b] for b in ch.encode("utf-8")) for ch in word]
        symbols = [c for s in symbols for c in s]
        while len(symbols) > 1:
            pairs = [
                (self.ranks.get((a, b), None), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:], strict=False))
            ]
            pairs = [(r, i) for r, i in pairs if r is not None]
            if not pairs:
                break
            _, i = min(pairs)
            symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
        return [self.vocab[s] for s in symbols]
