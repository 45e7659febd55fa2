"""Reasoning models: the markers that open and close a model's thinking, read from its
tokenizer and chat template.

Two families:

- **think tags** (Qwen3, the DeepSeek-R1 distills, ...): mlx-lm's own detection
  (``TokenizerWrapper.has_thinking`` / ``think_start_tokens`` / ``think_end_tokens``, from
  ``mlx_lm.tokenizer_utils._infer_thinking``: ``<think>``/``</think>`` and the other pairs
  it knows). Nothing here re-implements that list.
- **harmony** (gpt-oss): the channels ``<|channel|>analysis<|message|>…<|end|>`` (thinking)
  and ``<|start|>assistant<|channel|>final<|message|>…`` (the answer), told apart by the
  special tokens' ids (``engine.runtime.reasoning_phase``). mlx-lm 0.32 has no harmony parser, and
  the ``openai-harmony`` package (installable) cannot serve here: it parses token ids of its
  own o200k vocabulary only, which it downloads at first use.

Imports neither MLX nor Qt: the app reads the markers (``ModelInfo.reasoning``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine.api.errors import EngineError

THINKING = "thinking"
ANSWER = "answer"
Phase = Literal["thinking", "answer"]
"""A token's phase (``TokenStep.phase``); None there for a model without reasoning markers."""
PHASES = (THINKING, ANSWER)

HARMONY_SPECIALS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>")
HARMONY_THINKING_CHANNEL = "analysis"
HARMONY_START = "<|channel|>analysis<|message|>"
HARMONY_END = "<|end|><|start|>assistant<|channel|>final<|message|>"
"""What ends harmony's thinking: the analysis message closed, a final one opened. The
thinking budget forces it (gpt-oss's documented turn; harmony has no shorter end)."""
SWITCH = "enable_thinking"
"""The chat-template variable Qwen3's (and others') templates read to turn thinking off."""


def checked_switch(enabled: object) -> bool | None:
    """``enable_thinking`` as every backend takes it: True, False, or None (the template's
    default); anything else is refused before it is kept."""
    if enabled is not None and not isinstance(enabled, bool):
        raise EngineError(f"enable_thinking must be True, False or None, got {enabled!r}.")
    return enabled


@dataclass(frozen=True, slots=True)
class HarmonyIds:
    """The ids of harmony's structural tokens in one vocabulary."""

    start: int
    end: int
    message: int
    channel: int
    stops: tuple[int, ...]
    """``<|return|>`` and ``<|call|>`` where the vocabulary has them: they end a message too."""
    constrain: int | None = None
    """``<|constrain|>`` (a tool call's content type follows it in a header)."""


@dataclass(frozen=True, slots=True)
class ReasoningMarkers:
    """How a loaded model marks its thinking. Plain data: safe on any thread."""

    style: Literal["think", "harmony"]
    start_text: str
    """What opens thinking: ``<think>``; harmony ``<|channel|>analysis<|message|>``."""
    end_text: str
    """What closes it, and what the thinking budget forces: ``</think>``; harmony
    ``<|end|><|start|>assistant<|channel|>final<|message|>``."""
    start: tuple[int, ...]
    """``start_text``'s token ids."""
    end: tuple[int, ...]
    """``end_text``'s token ids."""
    template_switch: bool
    """Whether the chat template reads ``enable_thinking`` (the switch the app offers)."""
    harmony: HarmonyIds | None = None


def template_source(tokenizer: Any) -> str:
    """The chat template's text (every named template, for a tokenizer with several)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(str(t) for t in template.values())
    return template if isinstance(template, str) else ""


def has_thinking_switch(tokenizer: Any) -> bool:
    """Whether the chat template has the ``enable_thinking`` switch (its source names it)."""
    return SWITCH in template_source(tokenizer)


def _encode(tokenizer: Any, text: str) -> tuple[int, ...]:
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    return tuple(inner.encode(text, add_special_tokens=False))


def _harmony(tokenizer: Any, vocab: dict[str, int], switch: bool) -> ReasoningMarkers | None:
    if not all(t in vocab for t in HARMONY_SPECIALS):
        return None
    ids = HarmonyIds(
        start=vocab["<|start|>"],
        end=vocab["<|end|>"],
        message=vocab["<|message|>"],
        channel=vocab["<|channel|>"],
        stops=tuple(vocab[t] for t in ("<|return|>", "<|call|>") if t in vocab),
        constrain=vocab.get("<|constrain|>"),
    )
    start, end = _encode(tokenizer, HARMONY_START), _encode(tokenizer, HARMONY_END)
    return ReasoningMarkers("harmony", HARMONY_START, HARMONY_END, start, end, switch, ids)


def detect_markers(tokenizer: Any) -> ReasoningMarkers | None:
    """The reasoning markers of a loaded tokenizer (mlx-lm's ``TokenizerWrapper``), or None
    for a model without any: harmony's channel tokens, else mlx-lm's think tags."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    vocab = get_vocab() if callable(get_vocab) else {}
    switch = has_thinking_switch(tokenizer)
    harmony = _harmony(tokenizer, vocab, switch)
    if harmony is not None:
        return harmony
    if not getattr(tokenizer, "has_thinking", False):
        return None
    start, end = getattr(tokenizer, "think_start_tokens", None), getattr(tokenizer, "think_end_tokens", None)
    if not start or not end:
        return None
    return ReasoningMarkers(
        "think", str(tokenizer.think_start), str(tokenizer.think_end), tuple(start), tuple(end), switch
    )


def rfind(tokens: Sequence[int], sequence: Sequence[int]) -> int:
    """The last index where ``sequence`` starts in ``tokens``, or -1."""
    n = len(sequence)
    for i in range(len(tokens) - n, -1, -1):
        if tokens[i] == sequence[0] and list(tokens[i : i + n]) == list(sequence):
            return i
    return -1
