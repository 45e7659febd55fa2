"""A request to Logitscope's server, read into what the engine takes (no MLX, no network).

The body of ``/v1/chat/completions`` or ``/v1/completions`` as OpenAI defines it, plus every
Logitscope stage under llama.cpp's server field names (``top_k``, ``min_p``,
``repeat_penalty``, ``repeat_last_n``, ``dry_*``, ``xtc_*``, ``typical_p``, ``top_n_sigma``,
``mirostat*``, ``samplers``, ``n_probs``, ``post_sampling_probs``, ``grammar``,
``json_schema``), so a client written for llama.cpp's server works unchanged. Every field is
checked here, and the request refused with a :class:`FieldError` naming the field as the
client sent it, before anything reaches the engine. No field that would change the answer
is left unread: one the server does not implement, or does not know (a misspelling), is
refused (``engine.serve.known_fields``); only fields that change nothing a client receives
(``user``, ``cache_prompt``, …) are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.api.params import MAX_STOP_STRINGS, MAX_TOKENS_RANGE, SamplingParams, SamplingParamsError
from engine.serve.grammar_fields import read_grammar
from engine.serve.known_fields import FieldError, check_known
from engine.serve.prompts import Prompt, read_n, read_prompts, scoring_only

MAX_TOP_LOGPROBS = 20
"""OpenAI's limit for ``top_logprobs`` (llama.cpp's ``n_probs`` takes up to 100)."""

# llama.cpp's names for Logitscope's stages in ``samplers`` (common/sampling.cpp).
LLAMA_CPP_STAGES = {
    "penalties": "penalties",
    "dry": "dry",
    "top_n_sigma": "top_n_sigma",
    "top_k": "top_k",
    "typ_p": "typical_p",
    "typical_p": "typical_p",
    "top_p": "top_p",
    "min_p": "min_p",
    "xtc": "xtc",
    "temperature": "temperature",
    "temp": "temperature",
}
# llama.cpp's field -> Logitscope's field, where the name differs.
RENAMED = {
    "repeat_penalty": "repetition_penalty",
    "repeat_last_n": "penalty_window",
    "n_predict": "max_tokens",
    "max_completion_tokens": "max_tokens",
}
_NUMBERS = (
    "temperature",
    "top_p",
    "min_p",
    "typical_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "xtc_probability",
    "xtc_threshold",
    "dynatemp_range",
    "dynatemp_exponent",
    "mirostat_tau",
    "mirostat_eta",
    "top_n_sigma",
)
_INTEGERS = ("top_k", "dry_allowed_length", "dry_penalty_last_n")


@dataclass(frozen=True)
class ServedRequest:
    """What one request asks of the engine."""

    chat: bool
    messages: tuple[dict[str, str], ...]
    """The conversation (chat); empty for a completion."""
    prompt: str
    """The text to continue (a completion); "" for a chat."""
    params: SamplingParams
    stream: bool
    include_usage: bool
    logprobs: int | None
    """Candidates reported per token (0: the chosen token's logprob only); None: no logprobs."""
    post_sampling: bool
    """Report the distribution after the whole chain (llama.cpp's ``post_sampling_probs``)
    rather than the model's own (``raw``)."""
    llama_cpp_probs: bool
    """The client asked with llama.cpp's ``n_probs``: each chunk also carries
    ``completion_probabilities`` as llama.cpp's server writes them."""
    model: str
    sent: Mapping[str, Any] = field(default_factory=dict)
    """The request's settings as the client sent them: its body without the conversation or
    prompt and the fields that shape only the answer's transport (an app shows these)."""
    client: str = ""
    """Who sent it (its address and user agent; ``engine.serve.http`` fills it in)."""
    prompt_tokens: tuple[int, ...] | None = None
    """The prompt as tokens, when the engine tokenized it before it was submitted (off its
    own thread: ``ServingEngine.prepare``), or the client sent token ids; None: the engine
    tokenizes it when it starts it."""
    prompts: tuple[Prompt, ...] = ()
    """A completion's prompts as sent (``engine.serve.prompts``): strings or token ids, each
    a row of the batch; ``prompt`` is the first when it is a string."""
    n: int = 1
    """Choices per prompt (completions)."""
    echo: bool = False
    """The prompt's tokens come back first, with their logprobs (the engine's scoring path)."""
    generate: bool = True
    """False: ``max_tokens`` 0 with ``echo``, the prompt scored and nothing written."""

    @property
    def single(self) -> bool:
        """One reply to one text prompt, written: what every engine serves (the app's too)."""
        return self.chat or (self.n == 1 and not self.echo and self.generate and self.prompts == (self.prompt,))


NOT_SETTINGS = frozenset({"messages", "prompt", "stream", "stream_options", "model"})


def read_request(body: Any, chat: bool, max_tokens_limit: int = MAX_TOKENS_RANGE[1]) -> ServedRequest:
    """``body`` (the parsed JSON) as a :class:`ServedRequest`; a :class:`FieldError` for the
    first field that is wrong. ``max_tokens_limit``: the most a reply may have (the model's
    context)."""
    if not isinstance(body, Mapping):
        raise FieldError(None, "the request body must be a JSON object.")
    refused = check_known(body, chat)
    if refused is not None:
        raise FieldError(*refused)
    prompts = () if chat else read_prompts(body)
    n = read_n(body, chat, len(prompts))
    echo = not chat and _flag(body, "echo", False)
    generate = not scoring_only(body, echo)
    messages = _messages(body) if chat else ()
    prompt = prompts[0] if prompts and isinstance(prompts[0], str) else ""
    if not generate:  # checked as one token; nothing is written
        body = {k: v for k, v in body.items() if k not in ("max_completion_tokens", "n_predict")} | {"max_tokens": 1}
    stream = _flag(body, "stream", False)
    if stream and not (chat or (n == 1 and echo is False and len(prompts) == 1 and isinstance(prompts[0], str))):
        raise FieldError("stream", "stream is taken with one text prompt, n 1 and no echo: answered whole otherwise.")
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping):
        raise FieldError("stream_options", "stream_options must be an object.")
    logprobs, llama_cpp_probs = _logprobs(body, chat)
    params = _params(body, logprobs or 0, max_tokens_limit)
    model = body.get("model", "")
    return ServedRequest(
        chat=chat,
        messages=messages,
        prompt=prompt,
        params=params,
        stream=stream,
        include_usage=_flag(options, "include_usage", False),
        logprobs=logprobs,
        post_sampling=_flag(body, "post_sampling_probs", False),
        llama_cpp_probs=llama_cpp_probs,
        model=model if isinstance(model, str) else "",
        sent={k: v for k, v in body.items() if k not in NOT_SETTINGS},
        prompts=prompts,
        n=n,
        echo=echo,
        generate=generate,
    )


def _messages(body: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise FieldError("messages", "messages must be a non-empty list of {role, content} objects.")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("system", "user", "assistant", "developer"):
            raise FieldError(f"messages[{i}]", "each message needs a role: system, user or assistant.")
        extra = next((k for k, v in message.items() if k not in ("role", "content") and v not in (None, [], "")), None)
        if extra is not None:
            why = f"a message's {extra} is not implemented: role and content are read."
            raise FieldError(f"messages[{i}].{extra}", why)
        role = "system" if message["role"] == "developer" else message["role"]
        out.append({"role": role, "content": _content(message.get("content"), f"messages[{i}].content")})
    return tuple(out)


def _content(content: Any, where: str) -> str:
    """A message's text: a string, or OpenAI's list of parts (its text parts, joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) for p in content):
        if any(p.get("type") != "text" for p in content):
            raise FieldError(where, "only text parts are taken (this model reads text).")
        return "".join(str(p.get("text", "")) for p in content)
    raise FieldError(where, "a message's content must be a string or a list of text parts.")


def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise FieldError(name, f"{name} must be true or false, got {value!r}.")
    return value


def _int(body: Mapping[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise FieldError(name, f"{name} must be an integer in [{lo}, {hi}], got {value!r}.")
    return value


def _logprobs(body: Mapping[str, Any], chat: bool) -> tuple[int | None, bool]:
    """(candidates per token, or None for no logprobs; whether llama.cpp's ``n_probs`` asked)."""
    n_probs = _int(body, "n_probs", 0, 100)
    if chat:
        wanted = _flag(body, "logprobs", False)
        top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
        if top is not None and not wanted:
            raise FieldError("top_logprobs", "top_logprobs needs logprobs: true.")
        logprobs = (top or 0) if wanted else None
    else:  # the completions endpoint: logprobs is the number of candidates
        logprobs = _int(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    if n_probs:
        return max(logprobs or 0, n_probs), True
    return logprobs, False


OPENAI_DEFAULTS: Mapping[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
"""What a request that leaves a field out gets: OpenAI's defaults (its API reference), not
``SamplingParams``' own (greedy) nor llama.cpp's (temperature 0.8, top_k 40, min_p 0.05, …):
a client written for OpenAI's API gets the behaviour it was written for. Every other stage
is off unless asked; ``max_tokens`` is the rest of the context (:func:`_max_tokens`); no
``seed`` is a random one; no ``stop``, ``logit_bias`` or logprobs."""


def _params(body: Mapping[str, Any], top: int, max_tokens_limit: int) -> SamplingParams:
    values: dict[str, Any] = {"top_logprobs": top, **OPENAI_DEFAULTS}
    for name in _NUMBERS:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise FieldError(name, f"{name} must be a number, got {value!r}.")
        if name in _INTEGERS:
            if not float(value).is_integer():
                raise FieldError(name, f"{name} must be an integer, got {value!r}.")
            value = int(value)
        values[RENAMED.get(name, name)] = value
    if "top_n_sigma" in values:  # llama.cpp: -1 is off
        values["top_n_sigma"] = max(0.0, float(values["top_n_sigma"]))
    values.update(_max_tokens(body, max_tokens_limit))
    values.update(_penalty_window(body, values))
    seed = _int(body, "seed", -1, 2**63 - 1)
    if seed is not None and seed >= 0:  # llama.cpp: -1 is a random seed
        values["seed"] = seed
    values["stop"] = _stop(body)
    values["logit_bias"] = _logit_bias(body)
    if "dry_sequence_breakers" in body:
        breakers = body["dry_sequence_breakers"]
        if not isinstance(breakers, list) or not all(isinstance(b, str) for b in breakers):
            raise FieldError("dry_sequence_breakers", "dry_sequence_breakers must be a list of strings.")
        values["dry_sequence_breakers"] = tuple(breakers)
    values["samplers"] = _samplers(body)
    values["grammar"] = read_grammar(body)
    try:
        return SamplingParams(**values)
    except SamplingParamsError as exc:
        raise FieldError(_client_name(exc.field, body), str(exc)) from None


def _client_name(field: str, body: Mapping[str, Any]) -> str:
    """Logitscope's field as the client named it."""
    for theirs, ours in RENAMED.items():
        if ours == field and theirs in body:
            return theirs
    if field == "grammar":
        return next((k for k in ("response_format", "json_schema", "grammar") if k in body), field)
    if field == "top_logprobs":
        return "n_probs" if "n_probs" in body else ("top_logprobs" if "top_logprobs" in body else "logprobs")
    return field


def _max_tokens(body: Mapping[str, Any], limit: int) -> dict[str, Any]:
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        value = body.get(name)
        if value is None:
            continue
        if name == "n_predict" and value == -1:  # llama.cpp: until the end
            return {"max_tokens": limit}
        got = _int(body, name, 1, limit)
        return {"max_tokens": got}
    return {"max_tokens": limit}  # OpenAI's and llama.cpp's: until the end of the context


def _penalty_window(body: Mapping[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's ``repeat_last_n``: -1 the whole context (Logitscope's 0), 0 no penalties."""
    window = _int(body, "repeat_last_n", -1, 1_000_000)
    if window is None:
        return {}
    if window == 0:
        return {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "penalty_window": 0}
    return {"penalty_window": 0 if window == -1 else window}


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > MAX_STOP_STRINGS:
        raise FieldError("stop", f"stop must be a string or a list of at most {MAX_STOP_STRINGS} non-empty strings.")
    return tuple(stop)


def _logit_bias(body: Mapping[str, Any]) -> dict[int, float]:
    """OpenAI's ``{"id": bias}`` or llama.cpp's ``[[id, bias], …]`` (``false``: never)."""
    bias = body.get("logit_bias")
    if bias is None:
        return {}
    pairs: list[tuple[Any, Any]]
    if isinstance(bias, Mapping):
        pairs = list(bias.items())
    elif isinstance(bias, list) and all(isinstance(p, list) and len(p) == 2 for p in bias):
        pairs = [(p[0], p[1]) for p in bias]
    else:
        raise FieldError("logit_bias", "logit_bias must map token ids to biases.")
    out: dict[int, float] = {}
    for key, value in pairs:
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise FieldError("logit_bias", f"logit_bias keys must be token ids, got {key!r}.") from None
        if value is False:
            value = -100.0
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FieldError("logit_bias", f"logit_bias values must be numbers, got {value!r}.")
        out[token] = float(value)
    return out


def _samplers(body: Mapping[str, Any]) -> tuple[str, ...]:
    """llama.cpp's ``samplers`` (a list, or one string of names separated by ``;``), and its
    ``mirostat`` 2, whose chain is logit bias, temperature, mirostat."""
    mirostat = _int(body, "mirostat", 0, 2) or 0
    if mirostat == 1:
        raise FieldError("mirostat", "mirostat 1 (Mirostat 1.0) is not a Logitscope stage: use mirostat 2.")
    if mirostat == 2:
        return ("temperature", "mirostat_v2")
    samplers = body.get("samplers")
    if samplers is None:
        return SamplingParams().samplers
    if isinstance(samplers, str):
        samplers = [s for s in samplers.split(";") if s]
    if not isinstance(samplers, list) or not all(isinstance(s, str) for s in samplers):
        raise FieldError("samplers", "samplers must be a list of stage names.")
    unknown = [s for s in samplers if s not in LLAMA_CPP_STAGES]
    if unknown:
        names = ", ".join(sorted(set(LLAMA_CPP_STAGES)))
        raise FieldError("samplers", f"unknown stage {unknown[0]!r} in samplers; the stages are {names}.")
    out: list[str] = []
    for name in samplers:
        stage = LLAMA_CPP_STAGES[name]
        if stage not in out:
            out.append(stage)
    return tuple(out)


__all__ = ["FieldError", "ServedRequest", "read_request"]
