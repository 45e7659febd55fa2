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
from engine.remote.kind import NO_CONTINUE, ServerKind
from engine.remote.pieces import whole_reason
from engine.remote.resume import canonical_prefix
from engine.remote.servers import build_request, plain_prompt, stage_for, unsupported
from engine.remote.structured import grammar_refusals
from engine.remote.template import ChatTemplate


class RequestWriter:
    """``stage``: what the user said the server's logprobs are (``auto``: its kind's);
    ``chat``: ``/v1/chat/completions`` rather than ``/v1/completions``; ``chat_template``: a
    local tokenizer folder whose template renders the chat client-side (None: the served
    model's own, where its tokenizer is readable here: ``engine.remote.template``)."""

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
        self._template = ChatTemplate(chat_template)

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
        whole = reasoning_refusals(kind, params) + grammar_refusals(kind, params)  # said in their own words
        if whole:
            raise EngineError(str(whole[0]))
        bad = unsupported(kind, params)
        if bad:
            raise EngineError(f"{kind.title} does not take {', '.join(bad)}; set it to its off value.")
        if params.seed is None and seed is not None:
            params = params.with_changes(seed=seed)
        return params

    def body(self, req: RemoteRequest) -> tuple[str, dict[str, Any]]:
        """The path and body to send for ``req`` now; refuses what cannot be sent."""
        kind = self.require_kind()
        # Read the template only when a continuation needs it (a branch, a later piece).
        render = self._render if self._needs_template() and (not req.prefix or self._can_render()) else None
        try:
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
        except EngineError as exc:
            problem = self._template.problem
            raise (EngineError(f"{exc} (The template was not read: {problem}.)") if problem else exc) from None
        if self.enable_thinking is not None and "messages" in body:  # vLLM, SGLang, llama.cpp, mlx_lm.server
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        return path, body

    def prepare(self) -> None:
        """Read the chat template now (once connected), where a reply may need it, so the
        first reply does not wait for it."""
        if self.require_kind().streams_logprobs:
            return
        if self._needs_template():
            self._can_render()
        elif not self.chat:  # a plain reply in pieces checks its text with the tokenizer
            self._template.encoder(self.model or "")

    def _needs_template(self) -> bool:
        kind = self.require_kind()
        return self.chat and kind.continue_chat == NO_CONTINUE

    def _can_render(self) -> bool:
        return self._needs_template() and self._template.tokenizer(self.model or "") is not None

    def _render(self, messages: Sequence[dict[str, str]]) -> str:
        return self._template.render(self.model or "", messages, self.enable_thinking)

    def overlap(self, req: RemoteRequest) -> tuple[tuple[int | None, str], ...]:
        """The reply's tokens after the longest start whose text encodes to exactly its
        tokens (``engine.remote.resume``): () where all do, or where it cannot be told."""
        tokens = req.tokens
        if "".join(x for _, x in tokens) != req.prefix:
            return ()
        j = self.canonical(req, tokens)
        return () if j is None else tuple(tokens[j:])

    def canonical(self, req: RemoteRequest, tokens: Sequence[tuple[int | None, str]]) -> int | None:
        """How many of the reply's ``tokens`` (id, text, from its start) the text a piece
        sends encodes to exactly (``engine.remote.resume.canonical_prefix``): the chat
        rendered here, or the plain prompt (``/v1/completions``, which the server encodes
        as it is), then their texts; None where no tokenizer is readable here."""
        if self.chat:
            if not self._can_render():
                return None
            tok, base = self._template.tokenizer(self.model or ""), self._render(req.messages)
        else:
            tok, base = self._template.encoder(self.model or ""), plain_prompt(req.messages)
            if tok is None:
                return None
        return canonical_prefix(tok, base, tokens)

    def whole_reason(self, params: SamplingParams) -> str:
        """Why a reply under ``params`` is asked for whole ("" when in pieces:
        ``engine.remote.pieces``); reads the chat template the first time it is needed."""
        kind = self.require_kind()
        if kind.streams_logprobs:
            return whole_reason(kind, params, self.chat, "", False)
        problem, thinks = "", False
        if not self.chat and self._template.encoder(self.model or "") is None:
            problem = self._template.problem
        elif self._needs_template():
            problem = "" if self._can_render() else self._template.problem
            thinks = not problem and self.enable_thinking is not False and self._template.thinks(self.model or "")
        return whole_reason(kind, params, self.chat, problem, thinks)
