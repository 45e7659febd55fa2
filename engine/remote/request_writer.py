"""How a request to the served model is written, and what it refuses before anything is sent.

Held by :class:`engine.remote.backend.RemoteBackend`, which fills in what connecting and
loading found (the server's kind, the model's id, the server's context) and sends what
:meth:`RequestWriter.body` writes. The settings a server cannot apply are refused here, with
the server's name, before a request starts or a live change stops one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.api.errors import EngineError
from engine.api.params import SamplingParams
from engine.remote.events import RemoteRequest
from engine.remote.fields import reasoning_refusals
from engine.remote.kind import ServerKind
from engine.remote.servers import build_request, stage_for, unsupported


class RequestWriter:
    """``stage``: what the user said the server's logprobs are (``auto``: its kind's);
    ``chat``: ``/v1/chat/completions`` rather than ``/v1/completions``; ``chat_template``: a
    local tokenizer folder whose template renders the chat client-side."""

    def __init__(self, stage: str, chat: bool, chat_template: str | None) -> None:
        self.stage, self.chat = stage, chat
        self.kind: ServerKind | None = None
        """The server's kind, once connected."""
        self.model: str | None = None
        """The served model's id, once loaded (None before)."""
        self.context = 0
        """The server's context per request where it says it (llama.cpp), else 0."""
        self.enable_thinking: bool | None = None
        """The chat template's ``enable_thinking``, sent as ``chat_template_kwargs`` (None: not sent)."""
        self._chat_template = chat_template
        self._template: Any = None

    def require_kind(self) -> ServerKind:
        if self.kind is None or self.model is None:
            raise EngineError("not connected to a server yet: call load() first.")
        return self.kind

    def stage_of(self, params: SamplingParams) -> str:
        """The stage the server's logprobs are for a request under ``params``."""
        return stage_for(self.require_kind(), self.stage, params)

    def checked(self, params: SamplingParams, seed: int | None) -> SamplingParams:
        """``params`` as sent: refused if the server cannot apply them; a seed of None
        keeps ``seed``."""
        kind = self.require_kind()
        phases = reasoning_refusals(kind, params)
        if phases:
            raise EngineError(str(phases[0]))
        bad = unsupported(kind, params)
        if bad:
            raise EngineError(f"{kind.title} does not take {', '.join(bad)}; set it to its off value.")
        if params.seed is None and seed is not None:
            params = params.with_changes(seed=seed)
        return params

    def body(self, req: RemoteRequest) -> tuple[str, dict[str, Any]]:
        """The path and body to send for ``req`` now; refuses what cannot be sent."""
        kind = self.require_kind()
        render = self._render if self._chat_template is not None else None
        path, body = build_request(
            kind,
            req.params,
            req.messages,
            req.prefix,
            req.index,
            self.model or "",
            self.chat,
            self.stage,
            render,
            self.context,
        )
        if self.enable_thinking is not None and "messages" in body:  # vLLM, SGLang, llama.cpp, mlx_lm.server
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        return path, body

    def _render(self, messages: Sequence[dict[str, str]]) -> str:
        if self._template is None:
            from transformers import AutoTokenizer

            self._template = AutoTokenizer.from_pretrained(self._chat_template)
        return self._template.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
