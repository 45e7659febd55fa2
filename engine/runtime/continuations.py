"""Requests made from other requests: a branch (a different token at some position), a
continuation of a reply the engine no longer holds, and a fork (one prefill, N settings).

A mixin of :class:`engine.runtime.scheduler.Scheduler`; it only builds and checks requests and
hands them to the scheduler's queue, so every call still validates before any state
changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.api.carry import check_carry
from engine.api.errors import EngineError
from engine.api.events import Divergence
from engine.api.params import SamplingParams
from engine.runtime.reasoning_rows import continued_in_answer
from engine.runtime.requests import Request, check_prompt, check_token, check_tokens, new_request


class ContinuationsMixin:
    """Needs the scheduler's ``vocab_size``, ``context_length``, ``max_batch_size``, ``text``,
    ``_next_id``, ``_enqueue``, ``_record_for``, ``_live``, ``_checked``, ``cancel``,
    ``_first_difference``, ``reasoning`` and ``_set_params``."""

    def branch(self, request_id: int, position: int, forced_token: int) -> int:
        """Continue request ``request_id`` from output ``position`` with ``forced_token``.

        The original stops (if running) and keeps its tokens; the branch is a new
        request whose cache reuses the original's up to ``position``. Returns its id.
        """
        record = self._record_for(request_id)
        record.check_position(position)
        self._check_token("forced_token", forced_token)
        base_prompt, output = record.split(position)
        request = self._continuation(base_prompt, output, forced_token, record.params_at(position))
        request.carry_in = record.carry_at(position)
        if any(r.id == request_id for r in self._live()):
            self.cancel(request_id)
        return self._enqueue(request)

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
        checked = self._checked(params)
        self._check_token("forced_token", forced_token)
        prompt = check_tokens(prompt, "prompt", self.vocab_size, allow_empty=True)  # prompt + output is checked whole
        output = check_tokens(output, "output", self.vocab_size, allow_empty=True)
        carry_in = check_carry(carry)
        request = self._continuation(prompt, output, forced_token, checked)
        request.carry_in = carry_in
        return self._enqueue(request)

    def fork(self, prompt: Sequence[int], variants: Sequence[SamplingParams]) -> list[int]:
        """Prefill ``prompt`` once and continue it as one request per variant, each with its
        own parameters and seed, sharing the prefilled cache (copied per row when the
        group joins the batch). Returns the ids in the order given. Each step of the group
        also yields a :class:`Divergence` event."""
        tokens = check_prompt(prompt, self.vocab_size, self.context_length)
        checked = self._check_variants(variants)
        return self._enqueue_group([new_request(0, tokens, p, self.text.decode) for p in checked])

    def fork_from(self, request_id: int, position: int, variants: Sequence[SamplingParams]) -> list[int]:
        """Like :meth:`fork`, from request ``request_id``'s output before ``position``: each
        variant draws its own token at ``position`` (TokenStep indices continue from it)."""
        record = self._record_for(request_id)
        record.check_position(position)
        checked = self._check_variants(variants)
        base_prompt, output = record.split(position)
        requests = [self._continuation(base_prompt, output, None, p) for p in checked]
        for request in requests:
            request.carry_in = record.carry_at(position)
        return self._enqueue_group(requests)

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
        prompt = check_tokens(prompt, "prompt", self.vocab_size, allow_empty=True)  # prompt + output is checked whole
        output = check_tokens(output, "output", self.vocab_size, allow_empty=True)
        checked = self._check_variants(variants)
        carry_in = check_carry(carry)
        requests = [self._continuation(prompt, output, None, p) for p in checked]
        for request in requests:
            request.carry_in = carry_in
        return self._enqueue_group(requests)

    def _check_variants(self, variants: Sequence[SamplingParams]) -> list[SamplingParams]:
        if isinstance(variants, SamplingParams) or not isinstance(variants, Sequence) or not variants:
            raise EngineError("variants must be a non-empty list of SamplingParams.")
        if len(variants) > self.max_batch_size:
            raise EngineError(f"a fork may have at most {self.max_batch_size} variants, got {len(variants)}.")
        return [self._checked(p) for p in variants]

    def _enqueue_group(self, requests: list[Request]) -> list[int]:
        leader = requests[0]
        ids = []
        for request in requests:
            request.id = self._next_id + len(ids)
            ids.append(request.id)
            request.group = leader.id if len(requests) > 1 else None
        leader.followers = requests[1:]
        self._next_id += len(requests) - 1
        self._enqueue(leader)
        return ids

    def _check_token(self, name: str, token: object) -> None:
        check_token(token, name, self.vocab_size)

    def _continuation(
        self, prompt: list[int], output: list[int], forced_token: int | None, params: SamplingParams
    ) -> Request:
        full = check_prompt(prompt + output, self.vocab_size, self.context_length)
        request = new_request(
            self._next_id,
            full,
            params,
            self.text.decode,
            earlier_output=output,
            earlier_text=self.text.decode(output),
        )
        request.index_offset = len(output)
        request.forced_first = forced_token
        answer = continued_in_answer(request, self.reasoning, self.text.decode)
        if answer is not None:
            self._set_params(request, answer)
        return request

    def _divergences(self, requests: list[Request], pairs: list[tuple[int, int]], js) -> list[Divergence]:
        """One Divergence per fork group in this step, and the first differing index per pair."""
        by_group: dict[int, list[int]] = {}
        for k, (i, _) in enumerate(pairs):
            by_group.setdefault(requests[i].group, []).append(k)
        out = []
        for group, ks in by_group.items():
            ids, firsts = [], []
            for k in ks:
                a, b = requests[pairs[k][0]], requests[pairs[k][1]]
                key = (a.id, b.id)
                if self._first_difference.get(key) is None and a.generated[-1] != b.generated[-1]:
                    self._first_difference[key] = a.next_index - 1
                ids.append(key)
                firsts.append(self._first_difference.get(key))
            index = requests[pairs[ks[0]][0]].next_index - 1
            out.append(Divergence(group, index, tuple(ids), tuple(float(js[k]) for k in ks), tuple(firsts)))
        return out
