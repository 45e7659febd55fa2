"""A completions request's ``prompt``, ``echo``, ``n`` and ``max_tokens: 0`` read as OpenAI
defines them (no MLX, no network).

``prompt`` is a string, a list of strings, a list of token ids, or a list of such lists: each
prompt is one row of the engine's batch, and the answer's ``choices`` hold ``n`` of each, in
order (prompt 0's ``n`` choices first), indexed as OpenAI's and vLLM's are. Token ids are
checked here for their shape (integers, no empty list) and against the vocabulary where the
server knows it (``check_vocabulary``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.serve.known_fields import FieldError

MAX_CHOICES = 256
"""The most choices (prompts × ``n``) one request may ask for: each is a row of the batch."""

Prompt = str | tuple[int, ...]


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_prompts(body: Mapping[str, Any]) -> tuple[Prompt, ...]:
    """The request's prompts, each a non-empty string or a non-empty tuple of token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(_is_id(t) for t in prompt):
        prompts = [tuple(prompt)]
    elif isinstance(prompt, list) and prompt:
        prompts = list(prompt)
    else:
        raise FieldError("prompt", "prompt must be a non-empty string, list of strings, or list(s) of token ids.")
    out: list[Prompt] = []
    for i, one in enumerate(prompts):
        where = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        if isinstance(one, str):
            if not one:
                raise FieldError(where, f"{where} must not be empty.")
            out.append(one)
        elif isinstance(one, list | tuple):
            if not one:
                raise FieldError(where, f"{where} must hold at least one token id.")
            bad = next((t for t in one if not _is_id(t) or t < 0), None)
            if bad is not None or any(not _is_id(t) for t in one):
                raise FieldError(where, f"{where}'s token ids must be non-negative integers, got {bad!r}.")
            out.append(tuple(one))
        else:
            raise FieldError(where, f"{where} must be a string or a list of token ids, got {one!r}.")
    if len({type(p) for p in out}) > 1:
        raise FieldError("prompt", "prompt must hold strings or token-id lists, not both.")
    return tuple(out)


def check_vocabulary(prompts: Sequence[Prompt], vocab_size: int) -> None:
    """Every token id inside the vocabulary (``vocab_size`` 0: not known, nothing checked)."""
    if not vocab_size:
        return
    for i, one in enumerate(prompts):
        if isinstance(one, str):
            continue
        where = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
        bad = next((t for t in one if t >= vocab_size), None)
        if bad is not None:
            raise FieldError(where, f"{where}'s token ids must be in [0, {vocab_size - 1}], got {bad}.")


def read_n(body: Mapping[str, Any], chat: bool, prompts: int) -> int:
    """``n``: choices per prompt (completions), 1 on the chat endpoint."""
    n = body.get("n")
    if n is None:
        return 1
    if chat:
        if n != 1:
            raise FieldError("n", f"n must be 1 on the chat endpoint: one reply per request, got {n!r}.")
        return 1
    if not _is_id(n) or n < 1:
        raise FieldError("n", f"n must be a positive integer, got {n!r}.")
    if n * prompts > MAX_CHOICES:
        raise FieldError("n", f"n × the prompts ({n} × {prompts}) must be at most {MAX_CHOICES} choices.")
    return n


def scoring_only(body: Mapping[str, Any], echo: bool) -> bool:
    """Whether ``max_tokens`` (or its other names) is 0: the prompt scored, nothing written;
    only with ``echo``."""
    zero = next((k for k in ("max_tokens", "max_completion_tokens", "n_predict") if body.get(k) == 0), None)
    if zero is None:
        return False
    if not echo:
        raise FieldError(zero, f"{zero} 0 (scoring the prompt only) needs echo: true.")
    return True


__all__ = ["MAX_CHOICES", "Prompt", "check_vocabulary", "read_n", "read_prompts", "scoring_only"]
