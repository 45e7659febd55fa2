"""What each OpenAI-compatible server reports and accepts (docs/REMOTE.md has the table).

A server kind fixes three things: which distribution its logprobs are (the stage label
a remote ``TokenStep`` carries), which sampling fields it takes besides OpenAI's, and
how a reply is continued from text (a live change, a branch). Nothing here talks to
the network; :mod:`engine.remote.backend` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.api.capabilities import Capabilities
from engine.api.errors import EngineError
from engine.api.params import SamplingParams, SamplingParamsError
from engine.remote.fields import refusals, sampling_fields, unsupported
from engine.remote.kind import ASSISTANT_PREFILL, CONTINUE_FINAL_MESSAGE, NO_CONTINUE, ServerKind

__all__ = [
    "KINDS",
    "STAGE_CHOICES",
    "ServerKind",
    "build_request",
    "context_of",
    "detect_kind",
    "finite_logprob",
    "logprob_fields",
    "model_ids",
    "refusals",  # engine.remote.fields: which fields each kind takes
    "refused_by",
    "remote_capabilities",
    "sampling_fields",
    "stage_for",
    "unsupported",
]

# What the user may say a server reports. ``auto`` takes the kind's default.
STAGE_CHOICES = ("auto", "raw", "penalties", "final", "sglang")

_LLAMA_CPP_FIELDS = frozenset(
    {
        "top_k",
        "min_p",
        "typical_p",
        "repetition_penalty",
        "penalty_window",
        "top_n_sigma",
        "xtc_probability",
        "xtc_threshold",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "dynatemp_range",
        "dynatemp_exponent",
        "mirostat_tau",
        "mirostat_eta",
        "samplers",
    }
)

KINDS: dict[str, ServerKind] = {
    k.name: k
    for k in (
        ServerKind(
            "vllm",
            "vLLM",
            "raw",
            True,
            CONTINUE_FINAL_MESSAGE,
            20,
            frozenset({"top_k", "min_p", "repetition_penalty"}),
        ),
        ServerKind(
            "sglang",
            "SGLang",
            "sglang",
            True,
            CONTINUE_FINAL_MESSAGE,
            20,
            frozenset({"top_k", "min_p", "repetition_penalty"}),
        ),
        ServerKind("llama.cpp", "llama.cpp server", "raw", True, ASSISTANT_PREFILL, 100, _LLAMA_CPP_FIELDS),
        ServerKind(
            "mlx_lm",
            "mlx_lm.server",
            "penalties",
            False,
            NO_CONTINUE,
            10,
            frozenset({"top_k", "min_p", "repetition_penalty", "penalty_window", "xtc_probability", "xtc_threshold"}),
        ),
        ServerKind("lmstudio", "LM Studio", "raw", True, ASSISTANT_PREFILL, 20, frozenset({"top_k", "min_p"})),
        ServerKind("ollama", "Ollama", "raw", True, ASSISTANT_PREFILL, 20, frozenset()),
        ServerKind("openai", "OpenAI-compatible server", "raw", True, NO_CONTINUE, 20, frozenset()),
    )
}

# ``owned_by`` of /v1/models entries, as each server fills it in.
_OWNED_BY = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llama.cpp",
    "llama.cpp": "llama.cpp",
    "library": "ollama",
    "ollama": "ollama",
    "organization_owner": "lmstudio",
}


def detect_kind(models: Mapping[str, Any], server_header: str, props: Mapping[str, Any] | None) -> str:
    """The server kind from its ``/v1/models`` answer, its ``Server`` header and its
    ``/props`` answer (llama.cpp only; None when there was none)."""
    for entry in models.get("data") or []:
        if isinstance(entry, Mapping):
            kind = _OWNED_BY.get(str(entry.get("owned_by", "")).lower())
            if kind:
                return kind
    if props is not None and "default_generation_settings" in props:
        return "llama.cpp"
    # mlx_lm.server is Python's http.server and lists models without ``owned_by``.
    if server_header.startswith("BaseHTTP/"):
        return "mlx_lm"
    return "openai"


def context_of(props: Mapping[str, Any] | None) -> int:
    """llama.cpp's context per request (``/props``: ``default_generation_settings.n_ctx``,
    the slot's context); 0 when not said."""
    settings = (props or {}).get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, Mapping) else None
    return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else 0


def model_ids(models: Mapping[str, Any]) -> list[str]:
    return [str(e["id"]) for e in models.get("data") or [] if isinstance(e, Mapping) and "id" in e]


def stage_for(kind: ServerKind, stage: str, params: SamplingParams) -> str:
    """The stage name (``raw``, ``bias``, ``penalties``, ... as in ``STAGE_NAMES``) that
    the server's numbers describe for a request with ``params``.

    A stage that is off for these params changes nothing, so the label falls back to the
    last earlier stage that ran, as the local engine's chain leaves such stages out."""
    from engine.specs import row_chain

    rule = kind.default_stage if stage == "auto" else stage
    chain = row_chain(params)
    if rule == "sglang":
        rule = "penalties" if params.greedy or "temperature" not in chain else "temperature"
    if rule == "raw":
        return "raw"
    if rule == "final":
        return chain[-1] if chain else "raw"
    upto = chain[: chain.index(rule) + 1] if rule in chain else [s for s in chain if s in ("bias", "penalties")]
    return upto[-1] if upto else "raw"


def logprob_fields(kind: ServerKind, endpoint: str, top_logprobs: int, stage: str) -> dict[str, Any]:
    """Ask for the chosen token's logprob and ``top_logprobs`` alternatives."""
    n = min(top_logprobs, kind.max_top_logprobs)
    if endpoint == "chat" or kind.name == "mlx_lm":
        body: dict[str, Any] = {"logprobs": True}
        if n:
            body["top_logprobs"] = n
    else:  # the legacy completions API takes the count in ``logprobs``
        body = {"logprobs": n}
    if kind.name == "llama.cpp":
        body["post_sampling_probs"] = stage == "final"
    return body


def plain_prompt(messages: Sequence[Mapping[str, str]]) -> str:
    """The text a plain-text request (``/v1/completions``) sends before the reply."""
    return "\n\n".join(m["content"] for m in messages if m.get("content"))


def build_request(
    kind: ServerKind,
    params: SamplingParams,
    messages: Sequence[Mapping[str, str]],
    prefix: str,
    index: int,
    model: str,
    chat: bool,
    stage: str,
    render: Callable[[Sequence[Mapping[str, str]]], str] | None,
    context: int = 0,
) -> tuple[str, dict[str, Any]]:
    """(path, body) of a request for the reply to ``messages`` that continues ``prefix``
    (the reply so far) at output ``index``. Plain text goes to ``/v1/completions``; a chat
    to ``/v1/chat/completions``, its ``prefix`` as a trailing assistant message where the
    kind continues one, else rendered here by ``render`` and sent as text. ``context``:
    the server's context per request, 0 when unknown (``sampling_fields``)."""
    body = sampling_fields(kind, params, params.top_logprobs, context)
    body["max_tokens"] = params.max_tokens - index
    body["model"] = model
    text_prompt = None
    if not chat:
        text_prompt = plain_prompt(messages) + prefix
    elif prefix and kind.continue_chat not in (CONTINUE_FINAL_MESSAGE, ASSISTANT_PREFILL):
        if render is None:
            raise EngineError(
                f"{kind.title} cannot continue an assistant message in a chat; connect with "
                "chat_template (a local tokenizer folder) or use plain-text mode."
            )
        text_prompt = render(messages) + prefix
    if text_prompt is not None:
        endpoint, path = "text", "/v1/completions"
        body["prompt"] = text_prompt
    else:
        endpoint, path = "chat", "/v1/chat/completions"
        body["messages"] = [dict(m) for m in messages]
        if prefix:
            body["messages"].append({"role": "assistant", "content": prefix})
            if kind.continue_chat == CONTINUE_FINAL_MESSAGE:
                body.update(continue_final_message=True, add_generation_prompt=False)
    body.update(logprob_fields(kind, endpoint, params.top_logprobs, stage))
    if kind.name == "mlx_lm":  # its chosen tokens are read from the top lists (remote_stream)
        # greedy: the list's most likely; sampled: the one the text continues with, so
        # the longest list the server gives (engine.remote.chosen).
        wanted = kind.max_top_logprobs if not params.greedy else body.get("top_logprobs", 1)
        body["top_logprobs"] = max(1, wanted)
    return path, body


def finite_logprob(value: Any) -> float:
    """A reported logprob as a float: -inf for a removed token (llama.cpp writes the
    lowest float, JSON having no -inf), NaN for a missing one."""
    if value is None:
        return math.nan
    x = float(value)
    return -math.inf if x <= -1e30 else x


def remote_capabilities(kind: ServerKind, stage: str) -> Capabilities:
    """What a server of ``kind`` lets the app do, its logprobs being ``stage``."""
    only = "a server reports only the tokens it sampled: it needs a local model."
    return Capabilities(
        fork=True,  # emulated: one stream per variant (engine.remote.backend)
        network=True,
        reasons=(
            ("divergence", "a server sends only its top logprobs, not whole distributions to compare."),
            ("score", f"scoring a given text: {only}"),
            ("replay", f"replaying a reply under other settings: {only}"),
            ("fidelity", "the server chooses its own precision; it cannot be compared with float32 here."),
            ("compare_models", "a server sends only its top logprobs: the KL divergence needs whole distributions."),
            ("logit_lens", "the logit lens reads the model's layers, which stay on the server."),
            ("draft", "a draft model proposes to a model that runs here; a server's speculative decoding is its own."),
            ("precision", "the server chooses its own precision."),
            ("layers", f"{kind.title} does not say the model's architecture, vocabulary or context."),
            ("full_chain", f"{kind.title} reports one stage ({stage}): no entropies, survivors or other stages."),
            ("token_ids", f"{kind.title} may send a token's text without its id."),
            ("memory", "the server's memory is not reported."),
            ("load_files", "a server serves its own models: choose one of its model ids."),
            ("serve", f"Logitscope serves a model it runs itself; {kind.title} serves its own."),
        ),
    )


def refused_by(server: str, params: SamplingParams) -> list[SamplingParamsError]:
    """:func:`refusals` for the server kind named ``server`` (``ModelInfo.server``); none
    for "" (the local engine) or a kind not known here."""
    kind = KINDS.get(server)
    return [] if kind is None else refusals(kind, params)
