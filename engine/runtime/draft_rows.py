"""The draft model's side of the running batch: its caches and its sampling state, row for row.

A block is drafted for every row at once: one forward pass of the draft and one host read
a proposed position, whatever the batch's size. Both the caches and the stages' state
(penalty counts, DRY's history, a grammar's matcher, mirostat's μ) roll forward with the
tokens the target keeps, so a block costs the same at any length of history: the proposals
are accepted into the state from a :meth:`SamplingBatch.mark` and rewound to it once the
target has decided, and the caches are cut back to what every row kept.

The caches hold every row's history but its last ``pending`` tokens (the same number for
every row: each step of the batch, drafted or not, adds as many tokens to each row), which
the next block feeds first. A row that joins is read into caches of its own up to the same
point and appended; a row that leaves is filtered out; a row whose stage state missed
tokens (a plain step of the batch, a forced token) has its state made again from its
history, which is the only path whose cost grows with the history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.caches import batch as kv
from engine.models.load import LoadedModel
from engine.runtime.requests import Request
from engine.sampling.batch import SamplingBatch
from engine.sampling.unpack import RowInspection, to_host
from engine.stages.vocabulary import Vocabulary

DRAFT_TOP = 10
"""The draft's candidates a record keeps (at least; more when the row asks for more)."""
CATCH_UP_CHUNK = 512


@dataclass
class Proposal:
    """One row's draft block."""

    tokens: list[int]
    steps: list[RowInspection]
    """The draft's own inspection of each proposal (its chain, its candidates)."""
    context: int
    """The row's context length (prompt + output) when the block was drafted."""


def draft_params(params: SamplingParams) -> SamplingParams:
    """A row's settings as the draft draws with them: its own, with at least ``DRAFT_TOP``
    candidates recorded."""
    top = max(params.top_logprobs, DRAFT_TOP)
    return params if params.top_logprobs == top else params.with_changes(top_logprobs=top)


class DraftRows:
    """The draft's caches and sampling state for the rows of one target's batch."""

    def __init__(self, draft: LoadedModel, vocabulary: Vocabulary, width: int, piece: Callable[[int], str]) -> None:
        self.draft, self.vocabulary, self.width, self.piece = draft, vocabulary, width, piece
        self._clear()
        self._mark = None

    def _clear(self) -> None:
        self.ids: list[int] = []
        """The request of each row, in the draft's row order (its own: rows join at the end)."""
        self.caches: list | None = None
        self.cached: list[int] = []
        """Each row's context length (prompt + output) the caches hold."""
        self.known: list[int] = []
        """Each row's context length its stage state has taken."""
        self.sampling = SamplingBatch(self.vocabulary)

    # Rows --------------------------------------------------------------------------------

    def sync(self, requests: Sequence[Request], carries: Sequence[dict | None]) -> list[Request]:
        """The rows made those of ``requests`` (rows gone dropped, new ones read in, state
        caught up, settings followed); returns the requests in the draft's row order."""
        wanted = {r.id for r in requests}
        keep = [row for row, rid in enumerate(self.ids) if rid in wanted]
        if len(keep) < len(self.ids):
            self.caches = kv.filter_batch(self.caches, keep) if keep else None
            self.sampling.filter(keep)
            self.ids, self.cached, self.known = ([v[row] for row in keep] for v in (self.ids, self.cached, self.known))
        by_id = {r.id: (r, c) for r, c in zip(requests, carries, strict=True)}
        pending = {by_id[rid][0].history_length - n for rid, n in zip(self.ids, self.cached, strict=True)}
        stand = next(iter(pending), 1)  # what every row leaves out of the caches
        joining = [(r, c) for r, c in zip(requests, carries, strict=True) if r.id not in self.ids]
        # Rows that do not leave out as much (cannot happen while every step adds as much to every
        # row), or a new one too short to leave it out: every row is read in again, leaving one.
        if len(pending) > 1 or any(r.history_length <= stand for r, _ in joining):
            self._clear()
            stand, joining = 1, list(zip(requests, carries, strict=True))
        for request, carry in joining:
            self._join(request, carry, stand)
        ordered = [by_id[rid][0] for rid in self.ids]
        if any(k != r.history_length for k, r in zip(self.known, ordered, strict=True)):
            # A step without a block (the last token, a forced one): the state is made again.
            self.sampling = SamplingBatch(self.vocabulary)
            for request in ordered:
                params = draft_params(request.params)
                carry = by_id[request.id][1]
                self.sampling.extend(SamplingBatch.of(self.vocabulary, params, request.history, carry))
            self.known = [r.history_length for r in ordered]
        for row, request in enumerate(ordered):
            params = draft_params(request.params)
            if self.sampling.params[row] != params:  # a live change, from this block on
                self.sampling.set_params(row, params, request.history)
        return ordered

    def _join(self, request: Request, carry: dict | None, pending: int) -> None:
        """``request`` read in as a row of its own, all its context but the last ``pending``
        tokens in the caches."""
        history = request.history
        caches = kv.new_request_cache(self.draft.model)
        head = history[: len(history) - pending]
        for start in range(0, len(head), CATCH_UP_CHUNK):
            self.draft.model(mx.array([head[start : start + CATCH_UP_CHUNK]]), cache=caches)
            kv.eval_caches(caches)
        self.caches = kv.extend_batch(self.caches, kv.to_batch(caches))
        self.sampling.extend(SamplingBatch.of(self.vocabulary, draft_params(request.params), history, carry))
        self.ids.append(request.id)
        self.cached.append(len(head))
        self.known.append(len(history))

    # A block -----------------------------------------------------------------------------

    def propose(self, ordered: Sequence[Request], tokens: int, eos: frozenset[int]) -> list[Proposal]:
        """Up to ``tokens`` proposals for every row (``ordered``: the requests in row order,
        as :meth:`sync` gave them), drawn through each row's chain with the target's noise at
        that index; fewer for all when some row proposes an end of sequence (nothing follows
        it, and the target checks every row's block together)."""
        self._mark = self.sampling.mark()
        inputs = mx.array([_last(r, r.history_length - n) for r, n in zip(ordered, self.cached, strict=True)])
        proposed: list[list[int]] = [[] for _ in ordered]
        steps: list[list[RowInspection]] = [[] for _ in ordered]
        indices = [r.next_index for r in ordered]
        tops = [p.top_logprobs for p in self.sampling.params]
        for j in range(tokens):
            sampled = self.sampling.sample(self._logits(inputs), [n + j for n in indices])
            drawn = sampled.unpack_all(to_host(sampled.packed), tops, self.piece, self.sampling.counters())
            for row, inspection in enumerate(drawn):
                proposed[row].append(inspection.token_id)
                steps[row].append(inspection)
            if j + 1 == tokens or any(d.token_id in eos for d in drawn):
                break
            leaving = [_leaving(r, r.history_length, p) for r, p in zip(ordered, proposed, strict=True)]
            self.sampling.accept([d.token_id for d in drawn], leaving, drawn)
            inputs = mx.array([[d.token_id] for d in drawn])
        return [Proposal(p, s, r.history_length) for p, s, r in zip(proposed, steps, ordered, strict=True)]

    def _logits(self, inputs: mx.array) -> mx.array:
        """[B, V]: the draft's next-token logits at the target's width (a padded vocabulary
        is cut or filled with -inf: the token ids are the same)."""
        logits = self.draft.model(inputs, cache=self.caches)[:, -1, :].astype(mx.float32)
        have = logits.shape[-1]
        if have > self.width:
            return logits[:, : self.width]
        if have < self.width:
            return mx.concatenate([logits, mx.full((logits.shape[0], self.width - have), -mx.inf)], axis=1)
        return logits

    def settle(self, ordered: Sequence[Request], size: int, steps: Sequence[Sequence[TokenStep]]) -> None:
        """The target kept ``steps`` (each row's, in row order, as many for every row, already
        in its output) from a block of ``size`` proposals: the state goes back to where the
        block began and takes them, each with the target's own step (mirostat moves μ by the
        target's logprob, as the target's own state did); the caches are cut back to the
        context every row kept, less its last token (its last two after a bonus token)."""
        kept = len(steps[0]) if steps else 0
        self.sampling.rewind(self._mark)
        for k in range(kept):
            accepted = [row_steps[k] for row_steps in steps]
            leaving = [
                _leaving(r, r.history_length - kept, [s.token_id for s in row_steps[: k + 1]])
                for r, row_steps in zip(ordered, steps, strict=True)
            ]
            self.sampling.accept([s.token_id for s in accepted], leaving, accepted)
        self.known = [r.history_length for r in ordered]
        fed = size  # the pending tokens and the proposals but the last
        valid = min(size, kept)  # the pending tokens and the proposals the rows kept, but the last
        if fed > valid and self.caches is not None:
            for cache in self.caches:
                cache.trim(fed - valid)
        self.cached = [r.history_length - kept + valid - 1 for r in ordered]


def _last(request: Request, count: int) -> list[int]:
    """The last ``count`` tokens of ``request``'s context (prompt + output)."""
    out = request.generated[-count:]
    missing = count - len(out)
    return [*request.prompt[len(request.prompt) - missing :], *out] if missing > 0 else list(out)


def _leaving(request: Request, context: int, tail: Sequence[int]) -> int | None:
    """The token leaving ``request``'s penalty window as the last of ``tail`` arrives after
    the first ``context`` tokens of its prompt + output: one read, no copy of the history."""
    window = request.params.penalty_window
    length = context + len(tail)
    if window <= 0 or length <= window:
        return None
    index = length - window - 1
    if index >= context:
        return tail[index - context]
    prompt = request.prompt
    return prompt[index] if index < len(prompt) else request.generated[index - len(prompt)]
