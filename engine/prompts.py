"""Turning text and chat messages into prompt token ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.errors import EngineError


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Plain text as mlx-lm's generate encodes it (the tokenizer adds BOS if it should)."""
    return list(tokenizer.encode(text))


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Messages through the model's chat template, ready for the assistant's reply."""
    if not getattr(tokenizer, "chat_template", None):
        raise EngineError("this model has no chat template; send plain text instead.")
    rendered = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    return list(inner.encode(rendered, add_special_tokens=False))


def encode_messages(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Chat messages as prompt tokens: the chat template, or, for a model without one, the
    messages' texts as plain text (blank lines between them)."""
    if getattr(tokenizer, "chat_template", None):
        return encode_chat(tokenizer, messages)
    return encode_text(tokenizer, "\n\n".join(m["content"] for m in messages if m["content"]))


def scored_text(
    tokenizer: Any, text: str, prompt: str | Sequence[dict[str, str]] | None
) -> tuple[list[int], list[int]]:
    """(context, scored tokens) of a given text: with ``prompt`` (a user message, or chat
    messages), the text is the assistant's reply to it (:func:`encode_messages`) and only
    its own tokens are scored; else the text's first token is the context."""
    if prompt is not None:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        inner = getattr(tokenizer, "_tokenizer", tokenizer)
        return encode_messages(tokenizer, messages), list(inner.encode(text, add_special_tokens=False))
    tokens = encode_text(tokenizer, text)
    return tokens[:1], tokens[1:]
