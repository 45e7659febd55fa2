"""Which token mlx_lm.server drew, read from one reply: its text and its top lists.

mlx_lm.server (0.32) sends, for each generated token, either the chosen token's id and
logprob (``top_logprobs`` absent) or an unordered top-N list whose first entry is merely
the list's first (``top_logprobs: N``), never both. A sampled reply used to be asked for
twice with the same seed, once for each, and the two runs compared; but the second run
meets the server's prompt cache warmed by the first (and mlx-lm's seeded sampling on a
long-lived server is not reliable either: ml-explore/mlx-lm#1245), so the two could draw
differently and the reply failed. Now one request carries the top lists and the reply's
text, and the chosen token is the one the text continues with. What is read is exact (the
id and logprob are the server's own, from the list); what cannot be read surely is **not
reported** (id and logprob None), never guessed:

- Forward, from the reply's start: at a known byte offset, a candidate whose bytes come
  next is the choice if the text surely goes on after it, at one offset: the reply ends
  there, the next token's list matches there, or a token boundary is there (below).
  Several that fit (`` se``, `` sea``) are told apart by reading a few tokens ahead.
- A token that cannot be read (drawn from outside its list, or candidates the text
  cannot tell apart) is not reported, and so is the one before it unless a boundary
  follows that one (it could be the start of a longer token outside the list). Reading
  picks up after one or two such tokens where the next token, and the two after it,
  match at exactly one offset of the text and no neighbouring token would match there
  instead; farther, the offsets get too uncertain, and reading goes on from the end.
- Backward, from the reply's end (the last token ends where the text ends; the end token
  of a reply that stopped leaves no text), the same way, down to where forward reading
  stopped. The tokens between are not reported; for the eye, each shows the text of a
  candidate of its list that comes next, else the text up to the next token boundary.

**Token boundaries.** Tokenizers split text into words before they split words into
tokens (byte-level BPE's pre-tokenizers, SentencePiece splitting at spaces), so no token
holds a space after other text, letters after a newline, or a newline after a letter or
digit. Where the text has one of these, a token starts: a matched candidate before it is
not part of a longer token, and a run of unread tokens holds at least one token per word.

mlx-lm's detokenizer drops the reply's leading space; the first token may match without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.remote.wire import WireAlt, WireEntry

LOOKAHEAD = 3
"""Tokens read ahead to tell apart candidates that all fit."""
MAX_SKIP = 2
"""Unread tokens in a row forward reading steps over; after more it goes on from the end."""
MAX_TOKEN_BYTES = 24
"""The longest text one unread token is assumed to have."""
_SPACE = b" \t\n\r"


@dataclass(slots=True)
class _Reading:
    entries: Sequence[WireEntry]
    text: bytes

    # -- the text ------------------------------------------------------------------------

    def boundary(self, p: int) -> bool:
        """Whether a token surely starts at byte ``p`` (the module docstring)."""
        if not 0 < p < len(self.text):
            return p == len(self.text)
        before, here = self.text[p - 1 : p], self.text[p : p + 1]
        if here == b" ":
            return before not in _SPACE
        if before == b"\n":
            return here not in _SPACE
        return here == b"\n" and before.isalnum()

    def words(self, start: int, stop: int) -> int:
        """How many tokens at least start strictly inside ``text[start:stop]``."""
        return sum(1 for p in range(start + 1, stop) if self.boundary(p))

    # -- forward ---------------------------------------------------------------------------

    def matches(self, i: int, at: int) -> list[tuple[WireAlt, int]]:
        """Token ``i``'s candidates whose bytes come next at ``at``, with the offset after."""
        out = []
        for alt in self.entries[i].top:
            raw = alt.raw
            if raw and self.text.startswith(raw, at):
                out.append((alt, at + len(raw)))
            elif at == 0 and raw[:1] == b" " and self.text.startswith(raw[1:], 0):
                out.append((alt, len(raw) - 1))  # the detokenizer dropped the leading space
        return out

    def goes_on(self, i: int, at: int, depth: int = LOOKAHEAD) -> bool:
        """Whether tokens ``i``, ``i + 1``, … can match the text from ``at`` for ``depth``
        tokens or to the reply's end."""
        if at == len(self.text):
            return True
        if i == len(self.entries):
            return False
        return depth == 0 or any(self.goes_on(i + 1, after, depth - 1) for _, after in self.matches(i, at))

    def fits(self, i: int, at: int) -> list[tuple[WireAlt, int]]:
        """The candidates of :meth:`matches` after which the text surely goes on."""
        n = len(self.entries)
        return [
            (alt, after)
            for alt, after in self.matches(i, at)
            if self.boundary(after) or (i + 1 < n and self.matches(i + 1, after))
        ]

    def step(self, i: int, at: int) -> tuple[WireAlt | None, int] | None:
        """Token ``i`` at ``at``: (its candidate, or None where two with one text fit, and
        the offset after it), or None where it cannot be read."""
        options = self.fits(i, at)
        if len({after for _, after in options}) > 1:
            options = [(alt, after) for alt, after in options if self.goes_on(i + 1, after)]
        if len({after for _, after in options}) != 1:
            return None
        return (options[0][0] if len(options) == 1 else None), options[0][1]

    def anchored(self, j: int, at: int) -> bool:
        """Whether token ``j`` and the two after it match from ``at``."""
        return j < len(self.entries) and any(self.goes_on(j + 1, after, 2) for _, after in self.matches(j, at))

    def resync(self, i: int, at: int) -> tuple[int, int] | None:
        """Where forward reading picks up after token ``i`` at ``at`` could not be read: the
        nearest token anchored at exactly one offset within reach, where neither neighbour
        is anchored too; None when there is none."""
        n, end = len(self.entries), len(self.text)
        for k in range(1, MAX_SKIP + 1):
            j, reach = i + k, min(end, at + k * MAX_TOKEN_BYTES)
            if j == n:
                return (n, end) if reach == end else None
            first = at if at == 0 else at + k  # only the reply's first tokens may leave no text
            found = [o for o in range(first, reach) if self.words(at, o) < k and self.anchored(j, o)]
            neighbours = (j - 1, j + 1) if j - 1 > i else (j + 1,)
            if len(found) == 1 and not any(self.anchored(t, found[0]) for t in neighbours):
                return j, found[0]
        return None

    def split(self, first: int, stop_token: int, start: int, stop: int) -> list[bytes]:
        """The text ``[start, stop)`` of the unread tokens ``first .. stop_token - 1``, for
        the eye only (their ids and logprobs stay not reported): in order, each takes a
        candidate of its list that comes next, else the text to the next token boundary;
        the last takes what is left."""
        pieces, at = [], start
        for t in range(first, stop_token):
            if t == stop_token - 1 or at >= stop:
                pieces.append(self.text[at:stop])
                at = stop
                continue
            afters = [after for _, after in self.matches(t, at) if after <= stop]
            after = max(afters) if afters else next(p for p in range(at + 1, stop + 1) if self.boundary(p) or p == stop)
            pieces.append(self.text[at:after])
            at = after
        return pieces

    # -- backward --------------------------------------------------------------------------

    def ends(self, j: int, stop: int, floor: int) -> list[tuple[WireAlt, int]]:
        """Token ``j``'s candidates whose bytes end at ``stop`` (not before ``floor``), with
        the offset where they start."""
        return [
            (alt, stop - len(alt.raw))
            for alt in self.entries[j].top
            if alt.raw and stop - len(alt.raw) >= floor and self.text.endswith(alt.raw, 0, stop)
        ]

    def back_step(self, j: int, stop: int, i: int, floor: int) -> tuple[WireAlt | None, int] | None:
        """Token ``j`` ending at ``stop``, forward reading having stopped at token ``i`` at
        ``floor``: as :meth:`step`, its start known if a boundary is there or token ``j - 1``
        ends there."""
        if j == i:  # the last one left: it starts where forward reading stopped
            options = [(alt, start) for alt, start in self.ends(j, stop, floor) if start == floor]
        else:  # tokens i .. j - 1 hold the text before it, at least one per word
            options = [
                (alt, start)
                for alt, start in self.ends(j, stop, floor)
                if self.words(floor, start) < j - i
                and (self.boundary(start) or any(s >= floor for _, s in self.ends(j - 1, start, floor)))
            ]
        if len({start for _, start in options}) != 1:
            return None
        return (options[0][0] if len(options) == 1 else None), options[0][1]


def chosen_from_text(
    entries: Sequence[WireEntry], text: str, keep: int, silent_tail: int | None = 0
) -> list[WireEntry]:
    """``entries`` (each with its top list) with the chosen token read from ``text``: an
    entry's ``token_id``/``raw``/``logprob`` are the chosen candidate's, or None / the bytes
    the text gives it / NaN where it is not reported. Each keeps its ``keep`` most likely
    candidates and the chosen one. ``silent_tail``: how many last tokens left no text (1:
    the end token of a reply that stopped; None: not known, no backward reading)."""
    reading = _Reading(entries, text.encode("utf-8"))
    n, end = len(entries), len(reading.text)
    chosen: list[WireAlt | None] = [None] * n
    pieces = [b""] * n
    i, at = 0, 0
    while i < n and at < end:
        read = reading.step(i, at)
        if read is not None:
            chosen[i], after = read
            pieces[i] = reading.text[at:after]
            i, at = i + 1, after
            continue
        target = reading.resync(i, at)
        if target is None:
            break
        pieces[i : target[0]] = reading.split(i, target[0], at, target[1])
        i, at = target
    if i < n and at < end:  # the middle, read from the end where it can be
        j, stop = (n - 1 - silent_tail if silent_tail is not None else i - 1), end
        while j >= i and (read := reading.back_step(j, stop, i, at)) is not None:
            chosen[j], start = read
            pieces[j] = reading.text[start:stop]
            j, stop = j - 1, start
        pieces[i : j + 1] = reading.split(i, j + 1, at, stop)
    return [_entry(e, c, p, keep) for e, c, p in zip(entries, chosen, pieces, strict=True)]


def _entry(entry: WireEntry, alt: WireAlt | None, piece: bytes, keep: int) -> WireEntry:
    top = sorted(entry.top, key=lambda a: -a.logprob)[: max(keep, 1)]
    if alt is not None and alt not in top:
        top.append(alt)
    if alt is None:
        return WireEntry(None, piece, math.nan, tuple(top))
    return WireEntry(alt.token_id, alt.raw, alt.logprob, tuple(top))
