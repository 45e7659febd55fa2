"""Continuous batching: insert / step / cancel / update_params / branch.

Each :meth:`Scheduler.step` does one decode step for every row of the running
batch and, if a request is waiting, one prefill chunk of it, so a long prompt
never freezes the rows already generating. A request whose prompt is done
samples its first token alone and joins the batch for the next step.

Every public method validates all of its input before touching any state: a
rejected call raises, returns no id, enqueues nothing and changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import mlx.core as mx

from engine.api.draft import DEFAULT_DRAFT_TOKENS, check_draft_tokens
from engine.api.errors import EngineError
from engine.api.events import Event, Finished, FinishReason, PrefillProgress
from engine.api.params import SamplingParams
from engine.api.reasoning import detect_markers
from engine.caches import batch as kv
from engine.caches.quantized import check_kinds
from engine.models.load import LoadedModel
from engine.runtime.chunking import ChunkSizer
from engine.runtime.continuations import Continuations
from engine.runtime.fork_divergence import ForkDivergence
from engine.runtime.lookahead import Lookahead
from engine.runtime.prefill import PromptReader
from engine.runtime.reasoning_rows import live_settings, next_forced, phase_of
from engine.runtime.request_queue import RequestQueue
from engine.runtime.requests import (
    Request,
    RequestRecord,
    accept_token,
    check_params,
    check_prompt,
    check_request_id,
    finished_event,
    new_request,
    record_of,
)
from engine.runtime.speculative import Drafter, block_size, check_draft, run_block
from engine.runtime.text import TokenText
from engine.sampling.batch import SamplingBatch
from engine.sampling.divergence import group_pairs, pair_divergences
from engine.sampling.sampled import Sampled
from engine.sampling.unpack import RowInspection, to_host
from engine.stages.vocabulary import Vocabulary


class Scheduler:
    """Runs many requests on one model. Not thread-safe: call it from one thread."""

    def __init__(
        self,
        loaded: LoadedModel,
        max_batch_size: int = 16,
        prefill_chunk: int | None = 128,
        prefix_cache_entries: int = 8,
        history_records: int = 256,
        sample_ahead: bool = True,
    ) -> None:
        sizes = [("max_batch_size", max_batch_size)] + ([("prefill_chunk", prefill_chunk)] if prefill_chunk else [])
        if prefill_chunk is not None and not prefill_chunk:
            sizes.append(("prefill_chunk", prefill_chunk))
        for name, value in sizes:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise EngineError(f"{name} must be a positive integer or None, got {value!r}.")
        caches = kv.new_request_cache(loaded.model)
        unsupported = kv.unsupported_kinds(caches)
        if unsupported:
            raise EngineError(
                f"this model uses {', '.join(unsupported)} caches, which mlx-lm cannot batch "
                "(batched: KVCache, RotatingKVCache, ArraysCache, CacheList)."
            )
        check_kinds(caches, loaded.kv)
        self.kv_quantization = loaded.kv
        """The model's KV-cache quantization, fixed for this scheduler (its caches and prefix store)."""
        self.cache_kinds = kv.kinds(caches)
        self.loaded = loaded
        self.model = loaded.model
        self.vocab_size = loaded.vocab_size
        self.context_length = loaded.context_length
        self.max_batch_size = max_batch_size
        self.chunks = ChunkSizer(prefill_chunk)
        """Prefill chunk sizes: fixed, or (``prefill_chunk=None``) sized from the measured rate."""
        self.text = TokenText(loaded.tokenizer)
        self.reasoning = detect_markers(loaded.tokenizer)
        """The model's reasoning markers (``engine.api.reasoning``), or None: no token has a phase."""
        self.prefix_store = kv.PrefixStore(prefix_cache_entries)
        # Sliding windows wrap and recurrent state cannot be cut back: keep prompt ends.
        checkpoint = self.cache_kinds != ["KVCache"]
        self.prompts = PromptReader(self.kv_quantization, self.chunks, self.prefix_store, checkpoint)
        """Reads the prompt of the request at the head of the queue, a chunk per step."""
        self.queue = RequestQueue(history_records)
        self._active: list[Request] = []
        self._batch: list | None = None
        self.vocabulary = Vocabulary.of(loaded, self.text.piece)
        """What the stages' state resolves against the model's tokens: DRY's sequence
        breakers, the grammars' matchers."""
        self._sampling = SamplingBatch(self.vocabulary)
        self._pending: list[Event] = []
        self.divergence = ForkDivergence()
        self.continuations = Continuations(self, self.queue)
        """Requests made from others (branch, continue, fork): ``branch`` and the rest forward there."""
        self._prefilling: list[Request] = []  # the group whose prefill chunk runs now
        self.sample_ahead = sample_ahead
        self.drafter: Drafter | None = None
        """A draft model proposing blocks the target checks in one pass (``set_draft``), or None."""
        self._last_final: mx.array | None = None  # the last sampled step's final logits
        self._lookahead = Lookahead()
        """The next decode step for ``_active``, queued before this one was read back (_decode)."""

    # ----------------------------------------------------------------- public API

    def insert(self, prompt: Sequence[int], params: SamplingParams | None = None) -> int:
        """Queue a request; returns its id. Raises EngineError / SamplingParamsError."""
        tokens = check_prompt(prompt, self.vocab_size, self.context_length)
        checked = self.checked(params if params is not None else SamplingParams())
        return self.queue.enqueue(new_request(self.queue.next_id, tokens, checked, self.text.decode))

    def cancel(self, request_id: int) -> None:
        """Stop a request; a ``Finished("cancelled")`` comes with the next step."""
        request = self._find(request_id)
        if request in self._active:
            row = self._active.index(request)
            self._store_row(row, request)
            self._remove_rows([row])
        else:
            heir = request.followers[0] if request.followers else None  # a leader's, taking over
            if (alone := self.queue.cancel(request)) is not None:
                self.prompts.keep(alone)
            elif heir is not None:
                self.prompts.hand_over(request, heir)
        self._pending.append(self._finished(request, FinishReason.CANCELLED))

    def update_params(self, request_id: int, params: SamplingParams) -> None:
        """Replace a running request's parameters from its next token on."""
        request = self._find(request_id)
        checked = self.checked(params)
        if params.seed is None:
            checked = checked.with_changes(seed=request.params.seed)
        checked = live_settings(request, checked)
        self._sampling.prepare(checked)  # whatever a stage's state may refuse, before any state changes
        if request in self._active:
            self.set_params(request, checked, self._sampling, self._active.index(request))
        else:
            self.set_params(request, checked)

    def set_params(
        self, request: Request, params: SamplingParams, sampling: SamplingBatch | None = None, row: int = 0
    ) -> None:
        """A request's new parameters from its next token (a live change, the switch to
        ``think_variant``); ``sampling``: the batch holding its row, if it has one yet."""
        request.params = params
        request.stop_text.stops = params.stop
        # From the next token: text already generated stands, whatever the new stops are.
        request.stop_text.boundary = len(request.stop_text.text)
        if sampling is not None:
            sampling.set_params(row, params, request.history)

    def set_draft(self, draft: LoadedModel | None, tokens: int = DEFAULT_DRAFT_TOKENS) -> None:
        """Decode with ``draft`` proposing ``tokens`` at a time from the next step (None: no
        draft). Refused with the reason, changing nothing, for a draft that cannot serve."""
        if draft is not None:
            check_draft_tokens(tokens)
            check_draft(self.loaded, draft, self.cache_kinds)
        # Another draft's caches (or none) from now on: they live in the drafter.
        self.drafter = None if draft is None else Drafter(self.loaded, draft, tokens, self.text, self.vocabulary)

    def checked(self, params: SamplingParams) -> SamplingParams:
        """``params`` checked as a request takes them, its ``think_variant`` prepared now too
        (what a stage's state would refuse when the thinking ends is refused up front)."""
        checked = check_params(params, self.vocab_size)
        self._sampling.prepare(checked)
        if checked.think_variant is not None:
            self._sampling.prepare(checked.think_variant)
        return checked

    def step(self) -> list[Event]:
        """One decode step for the batch plus one prefill chunk; returns the events."""
        events, self._pending = self._pending, []
        if self._active:
            try:
                events.extend(self._decode())
            except Exception as exc:  # noqa: BLE001 - contained: only this step's rows end
                events.extend(self._fail_active(exc))
        if self.queue.waiting and len(self._active) + 1 + len(self.queue.waiting[0].followers) <= self.max_batch_size:
            try:
                events.extend(self._prefill_chunk())
            except Exception as exc:  # noqa: BLE001
                events.extend(self._fail_waiting(exc))
        self.divergence.keep({r.id for r in self._active})
        return events

    def has_work(self) -> bool:
        return bool(self._active or self.queue.waiting or self._pending)

    def request_ids(self) -> list[int]:
        return [r.id for r in self._live()]

    def params_of(self, request_id: int) -> SamplingParams:
        return self._find(request_id).params

    # Requests made from others (engine/runtime/continuations.py) ---------------------------

    def branch(self, request_id: int, position: int, forced_token: int) -> int:
        return self.continuations.branch(request_id, position, forced_token)

    def continue_output(self, prompt, output, forced_token: int, params: SamplingParams, carry=None) -> int:
        return self.continuations.continue_output(prompt, output, forced_token, params, carry)

    def fork(self, prompt: Sequence[int], variants: Sequence[SamplingParams]) -> list[int]:
        return self.continuations.fork(prompt, variants)

    def fork_from(self, request_id: int, position: int, variants: Sequence[SamplingParams]) -> list[int]:
        return self.continuations.fork_from(request_id, position, variants)

    def fork_output(self, prompt, output, variants: Sequence[SamplingParams], carry=None) -> list[int]:
        return self.continuations.fork_output(prompt, output, variants, carry)

    # What Continuations needs of the scheduler (its SchedulerHost) -------------------------------------

    def is_live(self, request_id: int) -> bool:
        return any(r.id == request_id for r in self._live())

    # ------------------------------------------------------------------ internals

    def _live(self) -> list[Request]:
        return self.queue.requests() + self._active

    def _find(self, request_id: int) -> Request:
        request_id = check_request_id(request_id)
        for request in self._live():
            if request.id == request_id:
                return request
        raise EngineError(f"no running request with id {request_id!r}.")

    def record_for(self, request_id: int) -> RequestRecord:
        request_id = check_request_id(request_id)
        for request in self._live():
            if request.id == request_id:
                if not request.generated:
                    raise EngineError(f"request {request_id} has generated no token yet.")
                return record_of(request)
        if (record := self.queue.record(request_id)) is not None:
            return record
        raise EngineError(f"no request with id {request_id!r} to branch from.")

    # What a failed step ends: only the requests of that step; their earlier tokens stand --

    def _fail_active(self, exc: Exception) -> list[Event]:
        """A decode step failed: its rows end with ``"error"`` (their earlier tokens stand),
        and the batch starts afresh, so the next request runs as on a new scheduler."""
        failed, self._active = self._active, []
        self._batch = None
        self._lookahead.clear()
        self._sampling = SamplingBatch(self.vocabulary)
        message = f"{type(exc).__name__}: {exc}"
        return [self._finished(r, FinishReason.ERROR, error=message) for r in failed]

    def _fail_waiting(self, exc: Exception) -> list[Event]:
        """A prefill chunk (or the first token after it) failed: that request and its fork
        group end; rows of it that already joined the batch are dropped again."""
        group, self._prefilling = self._prefilling, []
        self.prompts.drop()
        ids = {r.id for r in group}
        if group and group[0] in self.queue.waiting:
            self.queue.waiting.remove(group[0])
        joined = [i for i, r in enumerate(self._active) if r.id in ids]
        if joined:
            self._remove_rows(joined)
        for member in group:
            member.caches, member.followers = None, []
        message = f"{type(exc).__name__}: {exc}"
        return [self._finished(r, FinishReason.ERROR, error=message) for r in group if not r.finished]

    # Prefill ---------------------------------------------------------------------

    def _prefill_chunk(self) -> list[Event]:
        request = self.queue.waiting[0]
        self._prefilling = [request, *request.followers]
        last = self.prompts.read(self.model, request, busy=bool(self._active))
        events: list[Event] = [PrefillProgress(request.id, self.prompts.reported(request), len(request.prompt))]
        if last is None:
            return events
        began = time.perf_counter()  # the first token's draw, after the prompt's last chunk
        self.queue.waiting.popleft()
        group, request.followers = [request, *request.followers], []
        sampling = SamplingBatch(self.vocabulary)
        for member in group:
            member.fed = request.fed  # each row's copy of the cache holds the prompt
            sampling.extend(SamplingBatch.of(self.vocabulary, member.params, member.history, member.carry_in))
        step_events = self._sample(group, mx.repeat(last, len(group), axis=0) if len(group) > 1 else last, sampling)
        request.prefill_seconds += time.perf_counter() - began
        events.extend(step_events)
        done = self._finished_ids(step_events)
        staying = [i for i, member in enumerate(group) if member.id not in done]
        if staying:
            self._batch = kv.extend_batch(self._batch, kv.to_batch(request.caches, copies=len(staying)))
            sampling.filter(staying)
            self._sampling.extend(sampling)
            self._active.extend(group[i] for i in staying)
        if request.id in done:
            self.prompts.keep(request)
        request.caches = None
        return events

    # Decode ----------------------------------------------------------------------

    def _decode(self) -> list[Event]:
        """One token for every running row.

        The next step is queued whole before this one is read back (``engine.runtime.lookahead``).
        Its sampling is kept only while nothing it assumed changed (a live change, a join, a
        switch of settings or a forced token: its logits are sampled again), so a change
        applies from the next token and a token sampled ahead is never reported. New rows
        waiting to join turn sampling ahead off for a step.
        """
        logits, ahead = self._lookahead.take(self._sampling.version)
        if logits is None and self.drafter is not None:
            tokens = min(block_size(self.drafter, r, self.context_length) for r in self._active)
            if tokens > 0:
                return self._draft_block(tokens)
        if logits is None:
            inputs = mx.array([[r.generated[-1]] for r in self._active])
            logits = self.model(inputs, cache=self._batch)[:, -1, :]
            kv.after_batch_forward(self._batch, self.kv_quantization)
            for request in self._active:
                request.fed += 1
        ahead_ok = (
            self.sample_ahead
            and self.drafter is None
            and not self.queue.waiting
            and not all(self._last_step(r) for r in self._active)
        )
        events = self._sample(self._active, logits, self._sampling, sample_ahead=ahead_ok, ahead=ahead)
        self._drop_finished(events)
        return events

    def _draft_block(self, tokens: int) -> list[Event]:
        """A draft block of ``tokens`` for every row, checked in one pass (``engine.runtime.speculative``)."""
        requests = list(self._active)
        carries = [self._sampling.carry(row) for row in range(len(requests))]

        def forward(inputs: mx.array) -> mx.array:
            return self.model(inputs, cache=self._batch)

        def sample(logits: mx.array) -> tuple[list[Event], mx.array]:
            return self._sample(requests, logits, self._sampling), self._last_final

        block = run_block(self.drafter, requests, carries, tokens, forward, sample)
        for cache in self._batch:  # what the pass was fed and the rows did not keep
            cache.trim(block.surplus)
        for request in requests:
            request.fed += block.kept
        self._drop_finished(block.events)
        return block.events

    def _drop_finished(self, events: list[Event]) -> None:
        done = self._finished_ids(events)
        if done:
            leaving = [i for i, r in enumerate(self._active) if r.id in done]
            for row in leaving:
                self._store_row(row, self._active[row])
            self._remove_rows(leaving)

    def _remove_rows(self, rows: list[int]) -> None:
        keep = [i for i in range(len(self._active)) if i not in rows]
        self._batch = kv.filter_batch(self._batch, keep) if self._batch is not None else None
        self._sampling.filter(keep)
        self._active = [self._active[i] for i in keep]
        self._lookahead.keep(keep)

    def _last_step(self, request: Request) -> bool:
        """Whether the request finishes with its next token whatever it is."""
        return request.next_index + 1 >= request.params.max_tokens or request.history_length + 1 >= self.context_length

    # Sampling --------------------------------------------------------------------

    def _sample(
        self,
        requests: list[Request],
        logits: mx.array,
        sampling: SamplingBatch,
        sample_ahead: bool = False,
        ahead: Sampled | None = None,
    ) -> list[Event]:
        """Sample ``logits`` (or take ``ahead``, this step sampled during the last one, unless
        a token is forced), queue the next step when ``sample_ahead``, read this one back and
        accept its tokens."""
        forced = [next_forced(r) for r in requests]
        carries = [sampling.carry(row) for row in range(len(requests))]
        if ahead is None or any(f is not None for f in forced):
            sampled = sampling.sample(logits, [r.next_index for r in requests], forced)
        else:
            sampled = ahead
        self._last_final = sampled.final
        pairs = group_pairs([r.group for r in requests])
        packed_device = sampled.packed
        if pairs:  # the divergences ride along in the step's one transfer
            js = pair_divergences(sampled.final, pairs)
            packed_device = mx.concatenate([packed_device, js])
        if sample_ahead:
            mx.async_eval(packed_device)
            ahead_by = sampling if not pairs and sampling is self._sampling else None
            self._lookahead.queue(self.model, self._batch, self.kv_quantization, requests, sampled.tokens, ahead_by)
        host = to_host(packed_device)  # the one transfer
        top_ns = [r.params.top_logprobs for r in requests]
        inspections = sampled.unpack_all(host, top_ns, self.text.piece, sampling.counters())
        # The stages' state takes every row's new token first: the steps then say what it
        # knows of them (the grammar: whether the output is complete).
        sampling.accept([i.token_id for i in inspections], [r.leaving_next() for r in requests], inspections)
        events: list[Event] = []
        for row, request in enumerate(requests):
            request.carries.append(carries[row])
            inspection = sampling.with_state(row, inspections[row])
            events.extend(self._accept(request, inspection, forced[row] is not None))
        if pairs:
            events.extend(self.divergence.events(requests, pairs, host[host.size - len(pairs) :]))
        for row, request in enumerate(requests):
            if request.switch_to is not None:  # the thinking ended: its variant, as a live change
                request.before_switch = (request.next_index, request.params)
                self.set_params(request, request.switch_to, sampling, row)
                request.switch_to = None
        return events

    def _accept(self, request: Request, inspection: RowInspection, forced: bool) -> list[Event]:
        eos, context = self.loaded.eos_token_ids, self.context_length
        phase = phase_of(request, inspection.token_id, self.reasoning, self.text.decode)
        step, reason, stop = accept_token(request, inspection, forced, eos, context, self.text.piece, phase)
        return [step] if reason is None else [step, self._finished(request, reason, stop)]

    @staticmethod
    def _finished_ids(events: list[Event]) -> set[int]:
        return {e.request_id for e in events if isinstance(e, Finished)}

    def _finished(
        self, request: Request, reason: FinishReason, stop: str | None = None, error: str | None = None
    ) -> Finished:
        self.queue.remember(request)
        request.finished = True
        return finished_event(request, reason, stop, error)

    # Prefix reuse -----------------------------------------------------------------

    def _store_row(self, row: int, request: Request) -> None:
        caches = kv.extract_row(self._batch, row)
        self.prefix_store.add(request.history[: request.fed], caches)


__all__ = ["Scheduler"]
