"""The phase of every token of a reply (thinking or answer), fed token ids one by one, and
a finished reply split into its thinking and its answer.

By token ids, never by regular expressions over text: a marker typed inside the answer as
plain text is not a marker. The prompt decides where a reply starts: Qwen3's template
with ``enable_thinking=False`` writes ``<think>\\n\\n</think>\\n\\n`` into the prompt (the
reply is all answer), a "thinking" template opens ``<think>`` there (the reply starts in
thinking), and otherwise the model opens it itself (that token is thinking). The marker
tokens belong to the thinking: ``<think>`` and ``</think>`` are thinking, the answer starts
with the token after the end marker (where ``think_variant`` applies).

Harmony: a message's phase is its channel's (``analysis`` thinking, any other answer),
known when its header ends (``<|message|>``); header tokens and ``<|end|>`` keep the phase
before them, so ``<|end|><|start|>assistant<|channel|>final<|message|>`` is the end of the
thinking, and a reply's first header (after the prompt's ``<|start|>assistant``) is
thinking. Imports neither MLX nor Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.api.reasoning import ANSWER, HARMONY_THINKING_CHANNEL, THINKING, ReasoningMarkers, rfind

Decode = Callable[[Sequence[int]], str]


class PhaseTracker:
    """One reply's phase, token by token. ``phase`` is the phase the next token starts in."""

    def __init__(self, markers: ReasoningMarkers, decode: Decode, phase: str, header: list[int] | None = None) -> None:
        self.markers = markers
        self.decode = decode
        self.phase = phase
        self.thinking_tokens = 0
        """The reply's thinking tokens fed so far, markers not counted (the budget counts them)."""
        self.marker = False
        """Whether the last token fed completed a marker (or, harmony, was structure)."""
        self._recent: list[int] = []
        self._header = header  # harmony: the open header's tokens; None inside a message

    @classmethod
    def after_prompt(cls, markers: ReasoningMarkers, prompt: Sequence[int], decode: Decode) -> PhaseTracker:
        """The tracker for a reply that follows ``prompt`` (where the template left the phase)."""
        if markers.harmony is not None:
            last = rfind(prompt, (markers.harmony.start,))
            if last < 0:
                return cls(markers, decode, ANSWER)
            tracker = cls(markers, decode, THINKING, header=[])
            for token in prompt[last + 1 :]:
                tracker.feed(token)
            tracker.thinking_tokens = 0
            return tracker
        opened, closed = rfind(prompt, markers.start), rfind(prompt, markers.end)
        return cls(markers, decode, THINKING if opened > closed else ANSWER)

    def feed(self, token: int) -> str:
        """The phase of ``token``, the reply's next token; moves ``phase`` past it."""
        phase = self._feed_harmony(token) if self.markers.harmony is not None else self._feed_tags(token)
        if phase == THINKING and not self.marker:
            self.thinking_tokens += 1
        return phase

    @property
    def can_end(self) -> bool:
        """Whether forcing the end marker now closes the thinking cleanly (harmony: inside
        an analysis message, not within a header)."""
        return self.phase == THINKING and self._header is None

    def _feed_tags(self, token: int) -> str:
        start, end = self.markers.start, self.markers.end
        self._recent = (self._recent + [token])[-max(len(start), len(end)) :]
        before = self.phase
        self.marker = False
        if before == ANSWER and _ends_with(self._recent, start):
            self.phase, self.marker = THINKING, True
            return THINKING
        if before == THINKING and _ends_with(self._recent, end):
            self.phase, self.marker = ANSWER, True
        return before

    def _feed_harmony(self, token: int) -> str:
        ids = self.markers.harmony
        assert ids is not None
        before = self.phase
        if self._header is None:
            self.marker = token in (ids.start, ids.end, *ids.stops)
            if self.marker:
                self._header = []
            return before
        self.marker = True
        if token == ids.message:
            channel = self._channel(self._header)
            self._header = None
            self.phase = THINKING if channel == HARMONY_THINKING_CHANNEL else ANSWER
        elif token == ids.start:
            self._header = []
        else:
            self._header.append(token)
        return before

    def _channel(self, header: list[int]) -> str:
        """The channel a header names (``<|channel|>analysis``, ``<|channel|>commentary
        to=functions.f <|constrain|>json``), or "" for none."""
        ids = self.markers.harmony
        assert ids is not None
        if ids.channel not in header:
            return ""
        after = header[len(header) - header[::-1].index(ids.channel) :]
        if ids.constrain is not None and ids.constrain in after:
            after = after[: after.index(ids.constrain)]
        words = self.decode(after).split()
        return words[0] if words else ""


def _ends_with(tokens: list[int], sequence: Sequence[int]) -> bool:
    n = len(sequence)
    return len(tokens) >= n and tokens[-n:] == list(sequence)


@dataclass(frozen=True, slots=True)
class ReplyParts:
    """A reply split by phase, the markers left out."""

    thinking: str
    answer: str
    thinking_tokens: int
    answer_tokens: int


def split_reply(
    markers: ReasoningMarkers | None,
    token_ids: Sequence[int | None],
    texts: Sequence[str],
    phases: Sequence[str | None],
) -> ReplyParts:
    """A finished reply's thinking and answer text from its tokens (``TokenStep.token_id``,
    ``.text``, ``.phase``), the marker tokens left out where their ids are known, and
    trimmed as Qwen3's template trims a reply it is given (the thinking of surrounding
    newlines, the answer of leading ones). Tokens without a phase are answer."""
    thinking: list[str] = []
    answer: list[str] = []
    counts = {THINKING: 0, ANSWER: 0}
    marked = _marker_positions(markers, token_ids, texts, phases)
    for i, (text, phase) in enumerate(zip(texts, phases, strict=True)):
        side = THINKING if phase == THINKING else ANSWER
        counts[side] += 1
        if i not in marked:
            (thinking if side == THINKING else answer).append(text)
    return ReplyParts("".join(thinking).strip("\n"), "".join(answer).lstrip("\n"), counts[THINKING], counts[ANSWER])


def _marker_positions(
    markers: ReasoningMarkers | None,
    token_ids: Sequence[int | None],
    texts: Sequence[str],
    phases: Sequence[str | None],
) -> set[int]:
    """Which tokens are markers (a server's reply has no ids, and no markers in its text).
    Think tags: the start and end sequences among the thinking tokens. Harmony: the
    structure a tracker run again over the ids finds (the reply starts with a header)."""
    if markers is None or not token_ids or any(t is None for t in token_ids):
        return set()
    ids = [t for t in token_ids if t is not None]
    if markers.harmony is None:
        marked: set[int] = set()
        for sequence in (markers.start, markers.end):
            n = len(sequence)
            for i in range(len(ids) - n + 1):
                if ids[i : i + n] == list(sequence) and all(p == THINKING for p in phases[i : i + n]):
                    marked.update(range(i, i + n))
        return marked
    pieces = dict(zip(ids, texts, strict=True))
    decode: Decode = lambda run: "".join(pieces.get(i, "") for i in run)  # noqa: E731
    first = phases[0] if phases[0] in (THINKING, ANSWER) else ANSWER
    tracker = PhaseTracker(markers, decode, first, header=[])
    out = set()
    for i, token in enumerate(ids):
        tracker.feed(token)
        if tracker.marker:
            out.add(i)
    return out
