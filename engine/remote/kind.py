"""A server kind: what one kind of OpenAI-compatible server reports and accepts (plain data;
the kinds themselves are ``engine.remote.servers.KINDS``)."""

from __future__ import annotations

from dataclasses import dataclass

CONTINUE_FINAL_MESSAGE = "continue_final_message"  # vLLM, SGLang: a flag on the request
ASSISTANT_PREFILL = "prefill"  # llama.cpp, Ollama: a trailing assistant message is continued
NO_CONTINUE = "none"  # mlx_lm.server 0.32: always adds a new assistant header


@dataclass(frozen=True, slots=True)
class ServerKind:
    name: str
    title: str
    default_stage: str
    """``raw``, ``penalties`` (after logit bias and penalties), ``final`` (after the whole
    chain) or ``sglang`` (after penalties and temperature; ``penalties`` when greedy)."""
    streams_logprobs: bool
    """False: logprobs only come in a non-streamed response (mlx_lm.server 0.32)."""
    continue_chat: str
    max_top_logprobs: int
    extra_fields: frozenset[str]
    """SamplingParams fields it takes besides temperature, top_p, seed, max_tokens, stop,
    presence/frequency penalty and logit_bias (every kind takes those)."""
