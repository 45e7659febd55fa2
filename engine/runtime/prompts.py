"""Turning text and chat messages into prompt token ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.api.errors import EngineError
from engine.api.reasoning import SWITCH, has_thinking_switch


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Plain text as mlx-lm's generate encodes it (the tokenizer adds BOS if it should)."""
    return list(tokenizer.encode(text))


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]], enable_thinking: bool | None = None) -> list[int]:
    """Messages through the model's chat template, ready for the assistant's reply.
    ``enable_thinking``: the template's switch, passed only where the template has it
    (``engine.api.reasoning.has_thinking_switch``); None leaves mlx-lm's default (on for a
    model with think tags)."""
    if not getattr(tokenizer, "chat_template", None):
        raise EngineError("this model has no chat template; send plain text instead.")
    switch = {SWITCH: enable_thinking} if enable_thinking is not None and has_thinking_switch(tokenizer) else {}
    rendered = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False, **switch)
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    return list(inner.encode(rendered, add_special_tokens=False))


def encode_messages(
    tokenizer: Any, messages: Sequence[dict[str, str]], enable_thinking: bool | None = None
) -> list[int]:
    """Chat messages as prompt tokens: the chat template, or, for a model without one, the
    messages' texts as plain text (blank lines between them)."""
    if getattr(tokenizer, "chat_template", None):
        return encode_chat(tokenizer, messages, enable_thinking)
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


def token_ids(output: Sequence[int | None]) -> list[int]:
    """``output`` as the ids the local engine runs on; an ``EngineError`` where one is None
    (a reply a server wrote without reporting its token ids)."""
    missing = next((i for i, t in enumerate(output) if t is None), None)
    if missing is not None:
        raise EngineError(
            f"the local engine runs on token ids, and token {missing} of the reply has none "
            "(the server that wrote it did not report it)."
        )
    return [t for t in output if t is not None]
