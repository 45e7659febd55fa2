"""The remote backend: an OpenAI-compatible server generates, this reports what it says.

:class:`RemoteBackend` implements :class:`engine.api.backend.Backend` over HTTP (vLLM,
SGLang, llama.cpp's server, mlx_lm.server, LM Studio, Ollama). Its ``TokenStep`` holds
only what the server returned (see :mod:`engine.api.backend` and ``docs/REMOTE.md``): the
chosen token's logprob and the top alternatives at the one stage the server reports,
named in ``chain``; everything else None (token ids too, where the server sends none).
A failed request ends with a
:class:`RemoteFinished` whose ``finish_reason`` is ``"error"``, whose ``error`` says why
(as the local engine's ``Finished.error``) and whose ``exception`` is the
:class:`RemoteError` (HTTP status, the server's message); the tokens already emitted
stay valid.

API keys: pass ``api_key`` or ``api_key_env`` (the name of an environment variable).
The key goes into the ``Authorization`` header only; it is never printed, logged or
stored, and ``repr`` of the backend does not show it.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from engine.api.backend import Messages, ModelInfo, ProgressFn, StartedRequest
from engine.api.capabilities import NO_MODEL, Capabilities
from engine.api.errors import EngineError
from engine.api.events import Event, FinishReason, PrefillProgress, TokenStep
from engine.api.params import SamplingParams
from engine.api.reasoning import checked_switch
from engine.remote.emulation import ForkEmulation, Refused
from engine.remote.events import (
    RemoteFinished,
    RemoteRequest,
    finished,
    forced_step,
    read_usage,
    server_reason,
    token_step,
)
from engine.remote.listing import ServerListing, ask_server, pick_model, served_model_info
from engine.remote.pieces import CUT, FIRST_PIECE, PIECE
from engine.remote.reasoning import phased_tokens
from engine.remote.request_writer import RequestWriter
from engine.remote.resume import MAX_OVERLAP, cut_to_canonical, drop_overlap, resume_body
from engine.remote.servers import KINDS, STAGE_CHOICES
from engine.remote.stream import CHUNK, DONE, ERROR, PROGRESS, Job, Transport
from engine.remote.wire import RemoteError, WireToken

__all__ = ["RemoteBackend", "RemoteError", "RemoteFinished", "ServerListing", "probe"]


class RemoteBackend:
    """A server at ``base_url`` (``http://host:port``, with or without ``/v1``).

    ``stage``: what the server's logprobs are (``auto``: from the server kind; ``raw``,
    ``penalties``, ``final`` or ``sglang`` to say so). ``kind`` skips detection. ``chat``:
    use ``/v1/chat/completions`` (the server's chat template) or ``/v1/completions``
    with the messages' text. ``timeout``: seconds without a byte before a request fails
    (for mlx_lm.server, which answers only when done: one piece of a reply, or the whole
    reply where it is asked for whole; ``engine.remote.pieces``).
    ``chat_template``: a local tokenizer folder whose template renders chats client-side
    so a server that cannot continue an assistant message (mlx_lm.server) still can be
    continued through ``/v1/completions``. ``piece_tokens``: the tokens a reply asked for
    in pieces keeps from its first piece, then from each later one (``engine.remote.pieces``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        stage: str = "auto",
        kind: str | None = None,
        chat: bool = True,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retries: int = 2,
        chat_template: str | None = None,
        poll_s: float = 0.02,
        transport: httpx.AsyncBaseTransport | None = None,
        piece_tokens: tuple[int, int] = (FIRST_PIECE, PIECE),
    ) -> None:
        if stage not in STAGE_CHOICES:
            raise EngineError(f"stage must be one of {', '.join(STAGE_CHOICES)}, got {stage!r}.")
        if kind is not None and kind not in KINDS:
            raise EngineError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}.")
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise EngineError(f"the environment variable {api_key_env} is not set.")
        url = base_url.rstrip("/")
        self.base_url = url[:-3] if url.endswith("/v1") else url
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._forced_kind = kind
        self._timeouts = (timeout, connect_timeout, retries, transport)
        self._writer = RequestWriter(stage, chat, chat_template)  # what a request says, and refuses
        self._poll_s = poll_s
        self._piece_tokens = piece_tokens  # the first piece's tokens, then each later one's
        self._transport: Transport | None = None
        self._requests: dict[int, RemoteRequest] = {}
        self._pending: list[Event] = []
        self._next_id = 0
        self._pieces: dict[int, str] = {}
        self.info: ModelInfo | None = None
        self.models: list[str] = []
        self.listing_problem = ""
        """Why the server listed no models although it answered ("" when it listed them)."""
        self._forks = ForkEmulation(self)  # a server has no fork: one stream per variant

    @property
    def capabilities(self) -> Capabilities:
        """Declared once connected (``remote_capabilities``): fork is emulated, no scoring."""
        return self.info.capabilities if self.info is not None else NO_MODEL

    def __repr__(self) -> str:
        kind = self._writer.kind
        return f"RemoteBackend({self.base_url!r}, kind={kind.name if kind else None!r})"

    # -- connecting -------------------------------------------------------------------

    def _http(self) -> Transport:
        if self._transport is None:
            timeout, connect, retries, transport = self._timeouts
            self._transport = Transport(self.base_url, self._headers, timeout, connect, retries, transport)
        return self._transport

    def connect(self) -> list[str]:
        """Ask the server what it is and which models it serves (``/v1/models``); a server
        that answers but lists none leaves the reason in ``listing_problem``."""
        listing = ask_server(self._http(), self._forced_kind)
        self._writer.kind = KINDS[listing.kind]
        self.models, self.listing_problem = listing.models, listing.problem
        self._writer.context = listing.context
        return self.models

    def load(
        self, source: str, progress: ProgressFn | None = None, precision: str = "auto", kv: Any = None
    ) -> ModelInfo:
        """Use the server's model ``source`` (``""``: its first); the server chooses its own
        precision and KV cache (a ``kv`` that quantizes is refused, before connecting). Where
        the server could not list its models, a named ``source`` is used as named."""
        if kv is not None and getattr(kv, "enabled", False):
            raise EngineError("a server keeps its own KV cache: its quantization is set on the server.")
        self.connect()
        source, note = pick_model(ServerListing("", self.models, self.listing_problem), source, self.base_url)
        writer = self._writer
        kind = writer.kind
        assert kind is not None
        writer.model = source
        stage = kind.default_stage if writer.stage == "auto" else writer.stage
        self.info = served_model_info(kind, self.base_url, source, stage, writer.stage == "auto", writer.chat, note)
        writer.prepare()  # the chat template a reply in pieces continues with, read before the first reply
        if progress is not None:
            progress("connected", 1.0)
        return self.info

    # -- requests ---------------------------------------------------------------------

    def start(self, messages: Messages, params: SamplingParams) -> StartedRequest:
        return self.begin(messages, params, prefix="", index=0, forced=None)

    def continue_reply(
        self,
        messages: Messages,
        output: Sequence[int | None],
        forced_token: int | None,
        params: SamplingParams,
        *,
        output_text: str | None = None,
        forced_text: str | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> StartedRequest:
        """Continue from text: ``output_text + forced_text``. Only ``len(output)`` is read
        when ``output_text`` is given; ids (None where the server sent none) are looked up
        in the tokens this backend has seen only when a text is missing. ``carry`` is
        ignored: a server keeps its sampler's state itself."""
        if output_text is None:
            output_text = self._text_of(output)
        if forced_text is None:
            forced_text = self._text_of([forced_token])
        forced = (forced_token, forced_text)
        return self.begin(messages, params, output_text + forced_text, len(output), forced)

    def fork(self, messages: Messages, variants: Sequence[SamplingParams]) -> list[StartedRequest]:
        """A server has no fork: one stream per variant, started together (no ``Divergence``:
        that needs whole distributions, which no server sends)."""
        return self._forks.fork(messages, [self._writer.checked(p, None) for p in variants], "", 0)

    def fork_reply(
        self,
        messages: Messages,
        output: Sequence[int | None],
        variants: Sequence[SamplingParams],
        *,
        output_text: str | None = None,
        carry: Mapping[str, Any] | None = None,
    ) -> list[StartedRequest]:
        """Each variant continues the reply's text after its first ``len(output)`` tokens
        (their ids may be None: a server's reply continues from ``output_text``); ``carry``
        is ignored (a server keeps its sampler's state)."""
        text = self._text_of(output) if output_text is None else output_text
        return self._forks.fork(messages, [self._writer.checked(p, None) for p in variants], text, len(output))

    # What needs the model's whole distribution or its layers: refused with the declared reason.
    score_text = Refused("score")
    replay = replay_text = Refused("replay")
    check_fidelity = Refused("fidelity")
    load_second = compare_reply = compare_text = Refused("compare_models")
    load_draft = Refused("draft")
    lens_reply = lens_text = Refused("logit_lens")
    start_text = token_bytes = Refused("serve")

    def second_model(self) -> None:
        return None

    def release_second(self) -> None:
        """Nothing is held: a server cannot compare models."""

    def draft_model(self) -> None:
        return None

    def release_draft(self) -> None:
        """Nothing is held: a server's speculative decoding is its own."""

    def set_enable_thinking(self, enabled: bool | None) -> None:
        self._writer.enable_thinking = checked_switch(enabled)

    def _text_of(self, ids: Sequence[int | None]) -> str:
        if any(t is None or t not in self._pieces for t in ids):
            raise EngineError("a remote reply continues from text: pass output_text and forced_text.")
        return "".join(self._pieces[t] for t in ids if t is not None)

    def begin(self, messages: Messages, params: SamplingParams, prefix: str, index: int, forced) -> StartedRequest:
        params = self._writer.checked(params, None)
        req = RemoteRequest(self._next_id, tuple(dict(m) for m in messages), params, prefix, index)
        self._writer.body(req)  # refuses what cannot be sent before anything starts
        self._next_id += 1
        self._requests[req.id] = req
        if forced is not None:
            token_id, text = forced
            self._pending.append(self._forced_step(req, token_id, text))
            req.index += 1
        if req.index >= params.max_tokens:
            self._finish(req, FinishReason.LENGTH)
        else:
            self._launch(req)
        return StartedRequest(req.id, ())

    def check_request(self, req: RemoteRequest) -> None:
        """Refuse what the server cannot take (the body is built and dropped)."""
        self._writer.body(req)

    def _launch(self, req: RemoteRequest) -> None:
        kind = self._writer.require_kind()
        path, body = self._writer.body(req)
        req.generation += 1
        read_chosen = keep = None
        if kind.streams_logprobs:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        else:
            if not req.params.greedy:  # the chosen tokens are read from the answer's text
                read_chosen = req.params.top_logprobs
            req.whole = self._writer.whole_reason(req.params)
            req.overlap = self._writer.overlap(req) if req.params.greedy and req.pieces and not req.whole else ()
            if req.overlap:
                path, body = resume_body(self._writer.body, req)
            size, asked = self._piece_tokens[min(req.pieces, 1)], body["max_tokens"] - len(req.overlap)
            if not (req.whole or req.rest_whole) and asked > size and len(req.overlap) <= MAX_OVERLAP:  # .pieces
                body["max_tokens"], keep = len(req.overlap) + size + 1, len(req.overlap) + size
            req.pieces += 1
        job = Job(req.id, req.generation, path, body, kind.streams_logprobs, kind.name == "mlx_lm", read_chosen, keep)
        req.future = self._http().submit(job)

    def _stop(self, req: RemoteRequest) -> None:
        if req.future is not None:
            req.future.cancel()
            req.future = None
        req.generation += 1

    # -- events -----------------------------------------------------------------------

    def step(self) -> list[Event]:
        if any(r.future is not None for r in self._requests.values()) and not self._pending:
            self._drain(wait=self._poll_s)
        else:
            self._drain(wait=0.0)
        events, self._pending = self._pending, []
        return events

    def _drain(self, wait: float) -> None:
        if self._transport is None:
            return
        out = self._transport.out
        try:
            item = out.get(timeout=wait) if wait > 0 else out.get_nowait()
        except queue.Empty:
            return
        while True:
            self._handle(*item)
            try:
                item = out.get_nowait()
            except queue.Empty:
                return

    def _handle(self, what: str, request_id: int, generation: int, payload: Any) -> None:
        req = self._requests.get(request_id)
        if req is None or generation != req.generation:
            return  # a request since cancelled, finished or restarted
        if what == PROGRESS:
            self._pending.append(PrefillProgress(req.id, payload[0], payload[1]))
        elif what == CHUNK:
            if req.overlap and not drop_overlap(payload, req.overlap):
                at = req.index - len(req.overlap)
                error = RemoteError(f"the server's greedy reply changed when asked again from token {at}.")
                self._finish(req, FinishReason.ERROR, error)
                return
            req.overlap = ()
            tokens = phased_tokens(payload, req)
            if payload.finish_reason == CUT and not req.params.greedy:
                tokens = cut_to_canonical(req, payload, tokens, self._writer.canonical)
            for token, phase in tokens:
                self._pending.append(self._token_step(req, token, phase))
            if req.pieces <= 1:  # a later piece's prompt holds the reply so far
                read_usage(req, payload.usage)
        elif what == DONE:
            finish, usage = payload
            if req.pieces <= 1:
                read_usage(req, usage)
            if finish == CUT and req.index < req.params.max_tokens:
                self._launch(req)  # the next piece continues the reply so far
            else:
                self._finish(req, server_reason(finish))
        elif what == ERROR:
            self._finish(req, FinishReason.ERROR, payload)

    def _token_step(self, req: RemoteRequest, token: WireToken, phase: str | None = None) -> TokenStep:
        step = token_step(req, token, self._writer.stage_of(req.params), phase)
        if phase is None:
            req.tokens.append((token.token_id, token.text))
        if token.token_id is not None:
            self._pieces[token.token_id] = token.piece
        return step

    def _forced_step(self, req: RemoteRequest, token_id: int | None, text: str) -> TokenStep:
        return forced_step(req, token_id, text, self._writer.stage_of(req.params))

    def _finish(self, req: RemoteRequest, reason: FinishReason, error: RemoteError | None = None) -> None:
        self._stop(req)
        del self._requests[req.id]
        self._pending.append(finished(req, reason, error))

    def has_work(self) -> bool:
        return bool(self._requests) or bool(self._pending)

    def cancel(self, request_id: int) -> None:
        req = self._requests.get(request_id)
        if req is None:
            raise EngineError(f"no running request {request_id}.")
        self._drain(wait=0.0)  # keep what already arrived
        if request_id in self._requests:
            self._finish(req, FinishReason.CANCELLED)

    def cancel_all(self) -> None:
        for request_id in list(self._requests):
            self.cancel(request_id)

    def update_params(self, request_id: int, params: SamplingParams) -> None:
        """Stop the stream and continue from the text received so far with ``params``
        (a ``seed`` of None keeps the request's seed)."""
        req = self._requests.get(request_id)
        if req is None:
            raise EngineError(f"no running request {request_id}.")
        params = self._writer.checked(params, req.params.seed)
        self._drain(wait=0.0)
        if request_id not in self._requests:
            return  # it finished with what had arrived
        old = req.params
        req.params = params
        try:
            self._writer.body(req)
        except EngineError:
            req.params = old
            raise
        self._stop(req)
        if req.index >= params.max_tokens:
            self._finish(req, FinishReason.LENGTH)
        else:
            self._launch(req)

    def token_text(self, token_id: int) -> str:
        return self._pieces.get(token_id, "")

    @staticmethod
    def memory_bytes() -> int:
        return 0

    def release_thread(self) -> None:
        self.close()

    def close(self) -> None:
        for req in list(self._requests.values()):
            self._stop(req)
        self._requests.clear()
        if self._transport is not None:
            self._transport.close()
            self._transport = None


def probe(base_url: str, **options: Any) -> ServerListing:
    """What the server at ``base_url`` is: its kind, its model ids, and why it listed none
    although it answered (``problem``); raises RemoteError when it does not answer."""
    backend = RemoteBackend(base_url, **options)
    try:
        return ask_server(backend._http(), backend._forced_kind)
    finally:
        backend.close()
