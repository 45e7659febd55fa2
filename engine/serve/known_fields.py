"""Every request field the server knows, and what it does with each (no MLX, no network).

A field that would change the answer is never left unread: it is implemented
(``engine.serve.request_fields`` reads it), or refused with a 400 naming it unless it holds
its neutral value (``null``, ``false``, ``1``, an empty list: what leaving it out means). A
field that changes nothing a client receives is accepted and left alone, and the reason is
written here. Any other field, a misspelled ``temprature`` included, is refused as unknown,
as OpenAI's own API refuses one ("Unrecognized request argument supplied"). The table in
docs/ENGINE.md ("Request fields") is this module in words; a test holds them together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class FieldError(ValueError):
    """A request the server refuses (HTTP 400): ``param`` names the field as the client sent it."""

    def __init__(self, param: str | None, message: str) -> None:
        super().__init__(message)
        self.param = param


BOTH = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "n",
        "response_format",
        # llama.cpp's server's names (engine.serve.request_fields)
        "top_k",
        "min_p",
        "typical_p",
        "repeat_penalty",
        "repeat_last_n",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "xtc_probability",
        "xtc_threshold",
        "top_n_sigma",
        "dynatemp_range",
        "dynatemp_exponent",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "samplers",
        "n_predict",
        "n_probs",
        "post_sampling_probs",
        "grammar",
        "json_schema",
    }
)
"""Implemented on both endpoints."""

CHAT_ONLY = frozenset({"messages", "top_logprobs"})
COMPLETIONS_ONLY = frozenset({"prompt", "echo"})

IGNORED: Mapping[str, str] = {
    "user": "an end user's id for the provider's abuse monitoring; the answer does not depend on it",
    "safety_identifier": "the same as user",
    "metadata": "tags for a stored completion; nothing is stored",
    "store": "keep the completion for the provider's dashboards; nothing is stored",
    "service_tier": "a provider's latency and price tier; there is one tier",
    "prompt_cache_key": "a hint for the provider's prompt cache; the prefix store reuses prompts by their tokens",
    "prompt_cache_retention": "the same as prompt_cache_key",
    "prediction": "a predicted output only speeds OpenAI's reply, never changes it",
    "parallel_tool_calls": "acts only with tools, which are refused",
    "cache_prompt": "llama.cpp's prompt cache switch; the answer does not depend on it",
    "id_slot": "llama.cpp's slot to run in; there are no slots",
    "timings_per_token": "llama.cpp's timing figures; none are sent",
}
"""Accepted and left alone: the reason each changes nothing a client receives."""


def _null(value: Any) -> bool:
    return value is None


def _off(value: Any) -> bool:
    return value is None or value is False


def _none_or_one(value: Any) -> bool:
    return value is None or value == 1


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {} or value == ""


def _no_tool(value: Any) -> bool:
    return value is None or value in ("none", "auto")


def _text_only(value: Any) -> bool:
    return value is None or value == ["text"]


@dataclass(frozen=True)
class Refused:
    reason: str
    neutral: Callable[[Any], bool] = _null
    """Whether a value means the same as leaving the field out (then it is taken)."""
    neutral_words: str = "null"


_NO_TOOL = 'null, "none" or "auto"'
REFUSED: Mapping[str, Refused] = {
    "best_of": Refused("best_of is not implemented: one reply per row is written", _none_or_one, "null or 1"),
    "suffix": Refused("suffix (fill-in-the-middle) is not implemented", _empty, 'null or ""'),
    "tools": Refused("tools are not implemented (no tool calls are parsed)", _empty, "null or []"),
    "functions": Refused("functions are not implemented (no tool calls are parsed)", _empty, "null or []"),
    "tool_choice": Refused("tool_choice needs tools, which are not implemented", _no_tool, _NO_TOOL),
    "function_call": Refused("function_call needs functions, which are not implemented", _no_tool, _NO_TOOL),
    "audio": Refused("audio output is not implemented (this model writes text)"),
    "modalities": Refused("only text is written", _text_only, 'null or ["text"]'),
    "reasoning_effort": Refused("reasoning_effort is not implemented (set the model's own switch in the app)"),
    "verbosity": Refused("verbosity is not implemented"),
    "web_search_options": Refused("web search is not implemented"),
    "chat_template_kwargs": Refused(
        "chat_template_kwargs is not implemented: the template is rendered with its defaults", _empty, "null or {}"
    ),
    "ignore_eos": Refused("ignore_eos is not implemented: ban the end token with logit_bias", _off, "null or false"),
    "min_keep": Refused("min_keep is not implemented", lambda v: v is None or v == 0, "null or 0"),
    "n_keep": Refused("n_keep is not implemented: a reply stops at the context's end, never shifts it"),
    "t_max_predict_ms": Refused("t_max_predict_ms is not implemented: a reply is not cut by time"),
    "n_indent": Refused("n_indent is not implemented", lambda v: v is None or v == 0, "null or 0"),
    "return_tokens": Refused("return_tokens is not implemented: logprobs carry each token's id", _off, "null or false"),
    "lora": Refused("lora adapters are not implemented", _empty, "null or []"),
}
"""Known fields the server does not implement: refused unless neutral."""


def implemented(chat: bool) -> frozenset[str]:
    return BOTH | (CHAT_ONLY if chat else COMPLETIONS_ONLY)


def check_known(body: Mapping[str, Any], chat: bool) -> tuple[str, str] | None:
    """(field, why) of the first field ``body`` may not carry on this endpoint; None when
    every field is implemented, left alone for its reason, or neutral."""
    ours = implemented(chat)
    for name, value in body.items():
        if name in ours or name in IGNORED:
            continue
        if name in REFUSED:
            rule = REFUSED[name]
            if rule.neutral(value):
                continue
            return name, f"{rule.reason}; {name} may only be {rule.neutral_words}, got {value!r}."
        if name in implemented(not chat):
            other = "/v1/completions" if chat else "/v1/chat/completions"
            return name, f"{name} is a field of {other}, not of this endpoint."
        return name, f"unknown field {name!r}: no field of this name is read (a misspelling?)."
    return None


__all__ = [
    "BOTH",
    "CHAT_ONLY",
    "COMPLETIONS_ONLY",
    "FieldError",
    "IGNORED",
    "REFUSED",
    "Refused",
    "check_known",
    "implemented",
]
