"""A reasoning model's reply read by phase (Qt-free): where its thinking ends, what the
thinking's header says, and which settings a live change means once the answer started.

Each step's ``phase`` comes from the engine (``TokenStep.phase``: ``"thinking"``, the
markers included, then ``"answer"``; None for a model without reasoning markers). The chat,
the timeline and the inspector read a reply through these functions, so they agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.api.events import FinishReason, TokenStep
from engine.api.params import SamplingParams
from engine.api.reasoning import ANSWER, THINKING

FIRST_ANSWER_TOKENS = 8
"""How many of the answer's first tokens the timeline draws larger: where the model decided."""


@dataclass(frozen=True)
class ThinkingSpan:
    """A reply's thinking: its tokens are ``[start, end)``; ``end`` is the first answer
    token's index, or None while (or because) the thinking never closed."""

    start: int
    end: int | None
    tokens: int
    forced_end: bool
    """The end marker was forced by the thinking budget."""


def first_answer(steps: Sequence[TokenStep]) -> int | None:
    """The index of the first answer token that follows thinking, or None."""
    seen_thinking = False
    for i, step in enumerate(steps):
        if step.phase == THINKING:
            seen_thinking = True
        elif step.phase == ANSWER and seen_thinking:
            return i
    return None


def thinking_header(span: ThinkingSpan, streaming: bool, finish: str | None, seconds: float | None, open_: bool) -> str:
    """``▾ Thinking · 12 tokens · 1.4 s`` and, where it applies, how the thinking ended."""
    words = f"{'▾' if open_ else '▸'} Thinking"
    words += f" · {span.tokens} token{'s' if span.tokens != 1 else ''}"
    if seconds is not None:
        words += f" · {seconds:.1f} s"
    if span.end is None:
        if streaming:
            words += " · thinking…"
        elif finish == FinishReason.LENGTH:
            words += " · cut off by the token limit"
        elif finish == FinishReason.CANCELLED:
            words += " · stopped inside the thinking"
        else:
            words += " · never closed: the reply ended in it"
    elif span.forced_end:
        words += " · ended by the budget"
    return words


def live_params_for(steps: Sequence[TokenStep], params: SamplingParams) -> SamplingParams:
    """What a live change means for a reply being written: once its answer started, the
    settings sent for the answer (``think_variant``), since the engine replaces a running
    request's settings whole; before, the settings as they are (the variant still waits
    for the end of the thinking)."""
    answer = params.answer_settings()
    if answer is None or not steps or steps[-1].phase != ANSWER or first_answer(steps) is None:
        return params
    return answer


def phase_word(step: TokenStep) -> str:
    """The inspector's word for a token's phase: "" for a model without reasoning markers."""
    if step.phase == THINKING:
        return "thinking"
    return "answer" if step.phase == ANSWER else ""


def mark_thinking(pieces: Sequence[tuple[str, bool]]) -> str:
    """A copied text from its pieces (text, whether it is thinking): each run of thinking
    written as Qwen3's chat template writes a reply's reasoning, ``<think>\n…\n</think>\n\n``
    (its own marker tokens' text not doubled; ``</think>`` left out where the thinking never
    closed), the rest as it is."""
    runs: list[tuple[bool, str]] = []
    for text, thinking in pieces:
        if runs and runs[-1][0] == thinking:
            runs[-1] = (thinking, runs[-1][1] + text)
        else:
            runs.append((thinking, text))
    out: list[str] = []
    after_thinking = False
    for k, (thinking, text) in enumerate(runs):
        if thinking:
            bare = text.strip("\n").removeprefix("<think>")
            # Closed where the answer follows or the end marker was copied; a thinking the
            # reply ended in (or a selection ending in it) gets no </think> it never had.
            closed = k + 1 < len(runs) or bare.endswith("</think>")
            inner = bare.removesuffix("</think>").strip("\n")
            end = "\n</think>\n\n" if closed else "\n"
            out.append(f"<think>\n{inner}{end}" if inner.strip() else "")
        else:
            out.append(text.lstrip("\n") if after_thinking else text)
        after_thinking = thinking
    return "".join(out)


def forced_by_budget(step: TokenStep) -> bool:
    """Whether ``step`` is the end of thinking the thinking budget forced (not a token
    picked by hand: the budget's marker comes at or after that many thinking tokens)."""
    budget = step.params.thinking_budget
    return step.forced and step.phase == THINKING and budget is not None and step.index >= budget


def phase_title(step: TokenStep) -> str:
    """The inspector title's words for the token's phase ("" for a model without markers)."""
    word = phase_word(step)
    if forced_by_budget(step):
        return f"{word} · end of thinking forced by the budget"
    return word
