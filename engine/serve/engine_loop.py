"""The engine behind ``python -m engine serve``: one thread owns the model's session and steps
it; requests come in from the HTTP server's threads, and each request's events go back to its
own callback (which hands them to the event loop that waits for them).

Every request joins the one running batch (continuous batching): a request that arrives while
others decode is prefilled a chunk per step beside them, as in the app. A cancel (the client
went away) takes effect at the next step. A prompt to score (a completion's ``echo``) goes
through the engine's scoring path (``EngineSession.score_tokens``, what ``python -m engine
score`` runs), one chunk of it between two steps of the batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from engine.api.errors import EngineError
from engine.api.events import Event, Finished, FinishReason, PrefillProgress, ScoreDone, TokenStep
from engine.api.params import SamplingParams
from engine.runtime.prompts import encode_text
from engine.serve.freed_memory import give_back_freed_memory
from engine.serve.request_fields import FieldError, ServedRequest
from engine.serve.seam import Sink, deliver
from engine.session.session import EngineSession
from engine.stages.vocabulary import GrammarUnavailable

IDLE_WAIT_S = 0.5


@dataclass(frozen=True)
class _Start:
    request: ServedRequest
    sink: Sink
    started: Future


@dataclass(frozen=True)
class _Score:
    tokens: tuple[int, ...]
    params: SamplingParams
    sink: Sink
    started: Future


@dataclass(frozen=True)
class _Cancel:
    request_id: int


class EngineLoop:
    """The ``ServingEngine`` of ``python -m engine serve`` (``engine.serve.seam``): ``submit``
    a request (its id comes back through a future, or the engine's refusal); ``cancel`` one;
    ``close`` stops the thread. ``load`` makes the session, with its model loaded, on the
    engine's own thread: MLX's streams belong to the thread that made them (the app's worker
    loads its models the same way). Its error, if any, is raised here."""

    def __init__(self, load: Callable[[], EngineSession]) -> None:
        self._commands: queue.Queue = queue.Queue()
        self._sinks: dict[int, Sink] = {}
        self._scoring: dict[int, tuple[Iterator[Event], Sink]] = {}
        self._score_ids = itertools.count(-1, -1)  # never a scheduler's id
        self._running = True
        self._tokenizing = threading.Lock()
        self._longest: int | None = None
        self.peak_batch = 0
        """The most requests that got a token in one step (continuous batching at work)."""
        self.cancelled = 0
        """Requests cancelled before their end (their client went away)."""
        loaded: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(load, loaded), name="logitscope-serve", daemon=True)
        self._thread.start()
        self.session: EngineSession = loaded.result()
        self.info = self.session.info

    def submit(self, request: ServedRequest, sink: Sink) -> Future:
        """Start ``request``; each of its events goes to ``sink`` (on the engine's thread)."""
        started: Future = Future()
        self._commands.put(_Start(request, sink, started))
        return started

    def score(self, tokens: Sequence[int], params: SamplingParams, sink: Sink) -> Future:
        """Score ``tokens`` (its first token the context) through the engine's scoring path:
        its id (negative) through the future, then a ``TokenStep`` per scored token and a
        ``ScoreDone`` to ``sink``, or a ``Finished`` with its error."""
        started: Future = Future()
        self._commands.put(_Score(tuple(tokens), params, sink, started))
        return started

    def cancel(self, request_id: int) -> None:
        self._commands.put(_Cancel(request_id))

    def prepare(self, request: ServedRequest) -> ServedRequest:
        """``request`` with its prompt tokenized and its grammar compiled, refused with a
        ``FieldError`` when its prompt cannot fit the model's context. Called on the HTTP
        server's threads: the engine's thread then only queues it, and no stream waits while a
        long prompt is templated or a grammar compiled."""
        context = self.info.context_length
        param = "messages" if request.chat else "prompt"
        if context:
            # Before any tokenizing: a prompt whose bytes need more tokens than the context
            # holds even if every token were the vocabulary's longest.
            size = len(request.prompt.encode()) + sum(len(m["content"].encode()) for m in request.messages)
            if size > context * self._longest_token():
                raise FieldError(param, f"the prompt is longer than the model's context ({context:,} tokens).")
        # One template at a time among the HTTP threads; the engine's thread only reads the
        # tokenizer meanwhile, which a fast (Rust) tokenizer takes from several threads.
        with self._tokenizing:
            if request.prompt_tokens is not None:  # the client sent token ids (checked in range)
                tokens = list(request.prompt_tokens)
            elif request.chat:
                tokens = self.session.prompt_for(list(request.messages))
            else:
                tokens = encode_text(self.session.scheduler.loaded.tokenizer, request.prompt)
        if context and len(tokens) >= context:
            raise FieldError(
                param, f"the prompt is {len(tokens):,} tokens; the model's context holds {context:,} with the reply."
            )
        if request.params.grammar:
            try:
                self.session.scheduler.vocabulary.compile(request.params.grammar)
            except (ValueError, GrammarUnavailable) as exc:
                raise FieldError("grammar", str(exc)) from None
        return dataclasses.replace(request, prompt_tokens=tuple(tokens))

    def _longest_token(self) -> int:
        """At least the most bytes one token of the model's vocabulary stands for (read once):
        the longest token as the vocabulary writes it, in UTF-8, which is never shorter than
        the bytes it decodes to (byte-level BPE writes each byte as one character, SentencePiece
        a space as ▁ and a byte as <0xNN>). Decoding every token instead took 9 s on the
        default model's 49,152, at the first request."""
        if self._longest is None:
            tokenizer = self.session.scheduler.loaded.tokenizer
            try:
                vocab = tokenizer.get_vocab()
            except (AttributeError, NotImplementedError):  # no vocabulary to read: decode each
                size = self.session.scheduler.loaded.vocab_size
                vocab = {self.session.token_bytes(i).decode("utf-8", "replace"): i for i in range(size)}
            self._longest = max(1, *(len(token.encode("utf-8")) for token in vocab))
        return self._longest

    def busy(self) -> bool:
        """Whether a request is being written or scored (or waits to be)."""
        return bool(self._sinks) or bool(self._scoring)

    def close(self) -> None:
        self._running = False
        self._commands.put(None)
        self._thread.join(timeout=30)

    def token_bytes(self, token_id: int) -> bytes:
        return self.session.token_bytes(token_id)

    # The engine's thread --------------------------------------------------------------------

    def _run(self, load: Callable[[], EngineSession], loaded: Future) -> None:
        try:
            session = load()
        except BaseException as exc:  # noqa: BLE001 - the caller raises it
            loaded.set_exception(exc)
            return
        loaded.set_result(session)
        served = False  # requests ran since the memory they freed was last given back
        while self._running:
            busy = session.has_work() or bool(self._scoring)
            served |= busy
            try:
                command = self._commands.get(block=not busy, timeout=None if busy else IDLE_WAIT_S)
            except queue.Empty:
                command = None
                if served and not busy:  # idle for IDLE_WAIT_S after a burst (never between steps)
                    give_back_freed_memory()
                    served = False
            while command is not None:
                self._do(command)
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    command = None
            if not self._running:
                break
            for score_id in list(self._scoring):
                self._score_chunk(score_id)
            if session.has_work():
                # The scheduler contains a step's own errors; anything else ends every request
                # (each client is told), not the thread.
                try:
                    events = session.step()
                except Exception as exc:  # noqa: BLE001
                    events = self._fail_all(exc)
                rows = {e.request_id for e in events if isinstance(e, TokenStep)}
                self.peak_batch = max(self.peak_batch, len(rows))
                for event in events:
                    self._deliver(event)
        session.cancel_all()

    def _fail_all(self, exc: Exception) -> list[Event]:
        """Every request ended by an error outside the scheduler's own containment."""
        for request_id in list(self._sinks):
            with contextlib.suppress(Exception):
                self.session.cancel(request_id)
        with contextlib.suppress(Exception):
            self.session.step()  # the cancels' own Finished events are dropped: these replace them
        error = f"{type(exc).__name__}: {exc}"
        return [Finished(rid, FinishReason.ERROR, 0, 0, None, None, 0.0, "", error=error) for rid in list(self._sinks)]

    def _score_chunk(self, score_id: int) -> None:
        """One chunk of a scoring: its events up to the next chunk's progress, or its end."""
        events, sink = self._scoring[score_id]
        try:
            for event in events:
                if isinstance(event, PrefillProgress):
                    return
                with contextlib.suppress(RuntimeError):  # its event loop is gone: so is its client
                    sink(event)
                if isinstance(event, ScoreDone):
                    break
        except Exception as exc:  # noqa: BLE001 - one scoring's failure ends it alone
            error = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(RuntimeError):
                sink(Finished(score_id, FinishReason.ERROR, 0, 0, None, None, 0.0, "", error=error))
        del self._scoring[score_id]

    def _do(self, command: _Start | _Score | _Cancel) -> None:
        if isinstance(command, _Score):
            score_id = next(self._score_ids)
            try:  # the model's own checks now, not at the generator's first chunk: a refusal, not a failure
                command.params.verify(self.session.scheduler.loaded.vocab_size)
                events = self.session.score_tokens(command.tokens, command.params, request_id=score_id)
            except Exception as exc:  # noqa: BLE001 - the engine's refusal goes back to the client
                command.started.set_exception(exc)
                return
            self._scoring[score_id] = (iter(events), command.sink)
            command.started.set_result(score_id)
            return
        if isinstance(command, _Cancel):
            scoring = self._scoring.pop(command.request_id, None)
            if scoring is not None:
                close = getattr(scoring[0], "close", None)
                if close is not None:
                    close()
                return
            if command.request_id in self._sinks:
                with contextlib.suppress(EngineError):  # already ended: nothing to cancel
                    self.session.cancel(command.request_id)
            return
        try:
            request_id = self._start(command.request)
        except Exception as exc:  # noqa: BLE001 - the engine's refusal goes back to the client
            command.started.set_exception(exc)
            return
        self._sinks[request_id] = command.sink
        command.started.set_result(request_id)

    def _start(self, request: ServedRequest) -> int:
        if request.prompt_tokens is not None:  # tokenized by ``prepare``, off this thread
            return self.session.scheduler.insert(request.prompt_tokens, request.params)
        if request.chat:
            return self.session.start(list(request.messages), request.params).request_id
        return self.session.start_text(request.prompt, request.params).request_id

    def _deliver(self, event: Event) -> None:
        if deliver(self._sinks, event) and isinstance(event, Finished):
            self.cancelled += event.finish_reason == FinishReason.CANCELLED
