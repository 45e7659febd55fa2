"""Requests made from other requests: a branch (a different token at some position), a
continuation of a reply the engine no longer holds, and a fork (one prefill, N settings).

Held by :class:`engine.runtime.scheduler.Scheduler`, which forwards its ``branch`` /
``continue_output`` / ``fork`` / ``fork_from`` / ``fork_output`` here. It only builds and
checks requests and hands them to the scheduler's queue (``RequestQueue``; :class:`SchedulerHost` is what it needs of
the scheduler itself), so every call still validates before any state changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from engine.api.carry import check_carry
from engine.api.errors import EngineError
from engine.api.params import SamplingParams
from engine.api.reasoning import ReasoningMarkers
from engine.runtime.reasoning_rows import continued_in_answer
from engine.runtime.request_queue import RequestQueue
from engine.runtime.requests import Request, RequestRecord, check_prompt, check_token, check_tokens, new_request
from engine.runtime.text import TokenText


class SchedulerHost(Protocol):
    """What :class:`Continuations` needs of the scheduler (the queue itself is its own object)."""

    vocab_size: int
    context_length: int
    max_batch_size: int
    text: TokenText
    reasoning: ReasoningMarkers | None

    def record_for(self, request_id: int) -> RequestRecord: ...

    def is_live(self, request_id: int) -> bool: ...

    def cancel(self, request_id: int) -> None: ...

    def checked(self, params: SamplingParams) -> SamplingParams: ...

    def set_params(self, request: Request, params: SamplingParams) -> None: ...


class Continuations:
    """Requests made from other requests, queued on ``host``."""

    def __init__(self, host: SchedulerHost, queue: RequestQueue) -> None:
        self._host = host
        self._queue = queue

    def branch(self, request_id: int, position: int, forced_token: int) -> int:
        """Continue request ``request_id`` from output ``position`` with ``forced_token``.

        The original stops (if running) and keeps its tokens; the branch is a new
        request whose cache reuses the original's up to ``position``. Returns its id.
        """
        record = self._host.record_for(request_id)
        record.check_position(position)
        self._check_token("forced_token", forced_token)
        base_prompt, output = record.split(position)
        request = self._continuation(base_prompt, output, forced_token, record.params_at(position))
        request.carry_in = record.carry_at(position)
        if self._host.is_live(request_id):
            self._host.cancel(request_id)
        return self._queue.enqueue(request)

    def continue_output(
        self,
        prompt: Sequence[int],
        output: Sequence[int],
        forced_token: int,
        params: SamplingParams,
        carry: Mapping[str, Any] | None = None,
    ) -> int:
        """Like :meth:`branch`, for a reply the engine no longer holds (e.g. one saved
        before a restart): generate after ``prompt + output``, starting with ``forced_token``.
        TokenStep indices continue from ``len(output)``. ``carry``: the stage state the
        history cannot rebuild, as :func:`engine.api.carry.carry_from_steps` gives it for
        the reply's first ``len(output)`` tokens (None: those stages start afresh)."""
        checked = self._host.checked(params)
        self._check_token("forced_token", forced_token)
        prompt = check_tokens(
            prompt, "prompt", self._host.vocab_size, allow_empty=True
        )  # prompt + output is checked whole
        output = check_tokens(output, "output", self._host.vocab_size, allow_empty=True)
        carry_in = check_carry(carry)
        request = self._continuation(prompt, output, forced_token, checked)
        request.carry_in = carry_in
        return self._queue.enqueue(request)

    def fork(self, prompt: Sequence[int], variants: Sequence[SamplingParams]) -> list[int]:
        """Prefill ``prompt`` once and continue it as one request per variant, each with its
        own parameters and seed, sharing the prefilled cache (copied per row when the
        group joins the batch). Returns the ids in the order given. Each step of the group
        also yields a :class:`Divergence` event."""
        tokens = check_prompt(prompt, self._host.vocab_size, self._host.context_length)
        checked = self._check_variants(variants)
        return self._queue.enqueue_group([new_request(0, tokens, p, self._host.text.decode) for p in checked])

    def fork_from(self, request_id: int, position: int, variants: Sequence[SamplingParams]) -> list[int]:
        """Like :meth:`fork`, from request ``request_id``'s output before ``position``: each
        variant draws its own token at ``position`` (TokenStep indices continue from it)."""
        record = self._host.record_for(request_id)
        record.check_position(position)
        checked = self._check_variants(variants)
        base_prompt, output = record.split(position)
        requests = [self._continuation(base_prompt, output, None, p) for p in checked]
        for request in requests:
            request.carry_in = record.carry_at(position)
        return self._queue.enqueue_group(requests)

    def fork_output(
        self,
        prompt: Sequence[int],
        output: Sequence[int],
        variants: Sequence[SamplingParams],
        carry: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Like :meth:`fork_from`, for a reply the engine no longer holds: each variant
        draws its own token after ``prompt + output`` (indices continue from ``len(output)``),
        starting from the carried state ``carry`` (as in :meth:`continue_output`)."""
        prompt = check_tokens(
            prompt, "prompt", self._host.vocab_size, allow_empty=True
        )  # prompt + output is checked whole
        output = check_tokens(output, "output", self._host.vocab_size, allow_empty=True)
        checked = self._check_variants(variants)
        carry_in = check_carry(carry)
        requests = [self._continuation(prompt, output, None, p) for p in checked]
        for request in requests:
            request.carry_in = carry_in
        return self._queue.enqueue_group(requests)

    def _check_variants(self, variants: Sequence[SamplingParams]) -> list[SamplingParams]:
        if isinstance(variants, SamplingParams) or not isinstance(variants, Sequence) or not variants:
            raise EngineError("variants must be a non-empty list of SamplingParams.")
        if len(variants) > self._host.max_batch_size:
            raise EngineError(f"a fork may have at most {self._host.max_batch_size} variants, got {len(variants)}.")
        return [self._host.checked(p) for p in variants]

    def _check_token(self, name: str, token: object) -> None:
        check_token(token, name, self._host.vocab_size)

    def _continuation(
        self, prompt: list[int], output: list[int], forced_token: int | None, params: SamplingParams
    ) -> Request:
        full = check_prompt(prompt + output, self._host.vocab_size, self._host.context_length)
        request = new_request(
            self._queue.next_id,
            full,
            params,
            self._host.text.decode,
            earlier_output=output,
            earlier_text=self._host.text.decode(output),
        )
        request.index_offset = len(output)
        request.forced_first = forced_token
        answer = continued_in_answer(request, self._host.reasoning, self._host.text.decode)
        if answer is not None:
            self._host.set_params(request, answer)
        return request
