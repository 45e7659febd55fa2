"""Streaming detokenization and stop strings, on text rather than tokens.

The decoder keeps two offsets into the output tokens (as Hugging Face TGI
does): text is only released once the newest tokens decode to complete
characters, so multi-byte UTF-8 split over tokens never shows as U+FFFD.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Decode = Callable[[Sequence[int]], str]
_REPLACEMENT = "\ufffd"


@dataclass
class StreamDecoder:
    decode: Decode
    tokens: list[int] = field(default_factory=list)
    prefix_offset: int = 0
    read_offset: int = 0

    def add(self, token: int) -> str:
        """Append one token; return the newly complete text (may be empty)."""
        self.tokens.append(token)
        prefix = self.decode(self.tokens[self.prefix_offset : self.read_offset])
        full = self.decode(self.tokens[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith(_REPLACEMENT):
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.tokens)
            return full[len(prefix) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end)."""
        prefix = self.decode(self.tokens[self.prefix_offset : self.read_offset])
        full = self.decode(self.tokens[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.tokens)
        return full[len(prefix) :]

    @classmethod
    def resume(cls, decode: Decode, tokens: Sequence[int]) -> StreamDecoder:
        """A decoder in the state it would have after streaming ``tokens``: their text is
        released exactly as it was then (an incomplete character at the end stays held
        until a later token completes it). ``released`` is that text."""
        decoder = cls(decode)
        decoder.released = "".join(decoder.add(token) for token in tokens)
        return decoder

    released: str = ""
    """For a resumed decoder: the text its earlier tokens released (what the reply showed)."""


@dataclass
class StopText:
    """Accumulates output text and releases it unless it may begin a stop string."""

    stops: tuple[str, ...]
    text: str = ""
    released: int = 0
    boundary: int = 0
    """Where this request's own text starts: a stop string must lie after it (text before
    it came from an earlier reply that this one continues)."""

    def add(self, delta: str) -> tuple[str, str | None]:
        """(text safe to emit now, the stop string matched or None).

        On a match the text before the stop is released and the rest discarded.
        """
        scan_from = max(self.boundary, len(self.text) - max((len(s) for s in self.stops), default=0))
        self.text += delta
        if not self.stops:
            return self._release(len(self.text)), None
        hits = [(self.text.find(s, scan_from), s) for s in self.stops]
        hits = [(i, s) for i, s in hits if i >= 0]
        if hits:
            at, stop = min(hits)
            out = self._release(at)
            self.text = self.text[:at]
            return out, stop
        return self._release(len(self.text) - self._held_suffix()), None

    def flush(self) -> str:
        return self._release(len(self.text))

    def _held_suffix(self) -> int:
        """Length of the longest end of the text that is a proper start of a stop string."""
        longest = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def _release(self, upto: int) -> str:
        upto = max(upto, self.released)
        out = self.text[self.released : upto]
        self.released = upto
        return out
