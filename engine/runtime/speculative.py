"""Speculative decoding: a draft model proposes a block, the target checks it in one pass.

The scheme is mlx-lm's (``speculative_generate_step``): at every position of the block
the target draws its own token exactly as it would without a draft — the same chain, the
same state, the same seeded noise (``engine.sampling.sampler.step_keys`` keys it by the
token's output index) — and the draft's token is accepted while it equals that draw. So
the reply is the target's own token for token, greedy or seeded, and each token keeps the
target's whole inspection; the draft only decides how many tokens one target pass yields.
The draft draws through the row's own chain with the *same* noise as the target at that
index, so where the two distributions are close its proposals are the target's draws.

Rows of a batch check their blocks together: the block ends for every row at the first
position where some row's draw differs from its proposal (or some row finishes), so all
rows keep the same number of tokens and the batch cache is cut back by one amount. Every
token kept is still each row's own draw. The draft's caches and sampling state are a batch
of their own, row for row the target's (``engine.runtime.draft_rows``): a block is drafted
for every row at once, and rolls forward with the tokens kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from engine.api.draft import NO_DRAFT_STATS, Coupling, DraftCandidate, DraftRecord, Outcome
from engine.api.errors import EngineError
from engine.api.events import Event, Finished, TokenStep
from engine.models.load import LoadedModel
from engine.runtime.draft_rows import DraftRows, Proposal
from engine.runtime.requests import Request
from engine.runtime.text import TokenText


def check_draft(target: LoadedModel, draft: LoadedModel, cache_kinds: Sequence[str]) -> None:
    """Refuse, with the reason, a draft that cannot serve ``target`` (EngineError)."""
    if list(cache_kinds) != ["KVCache"]:
        raise EngineError(
            f"speculative decoding cuts the target's cache back after a rejected draft token; this model's "
            f"caches ({', '.join(cache_kinds)}) cannot be cut back at any position."
        )
    if target.kv.enabled:
        raise EngineError("speculative decoding needs the target's KV cache unquantized: switch the KV cache off.")
    kinds = sorted({type(c).__name__ for c in make_prompt_cache(draft.model)})
    if kinds != ["KVCache"]:
        raise EngineError(f"the draft model's caches ({', '.join(kinds)}) cannot be cut back: it cannot draft.")
    ours, theirs = target.vocabulary() or {}, draft.vocabulary() or {}
    if not ours or ours != theirs:
        missing = len(set(ours.items()) - set(theirs.items()))
        raise EngineError(
            f"{draft.name} does not share {target.name}'s vocabulary ({len(theirs):,} tokens against "
            f"{len(ours):,}; {missing:,} of the target's differ or are missing): its token ids would mean "
            "other text."
        )


class Drafter:
    """A draft model proposing blocks of ``tokens`` for the rows of one target."""

    def __init__(
        self, target: LoadedModel, draft: LoadedModel, tokens: int, text: TokenText | None, vocabulary
    ) -> None:
        self.target, self.draft, self.tokens = target, draft, tokens
        self.text, self.vocabulary = text, vocabulary
        self._rows: DraftRows | None = None

    @property
    def rows(self) -> DraftRows:
        """The draft's caches and sampling state, row for row the target's batch (made at
        the first block)."""
        if self._rows is None:
            self._rows = DraftRows(self.draft, self.vocabulary, self.target.vocab_size, self.text.piece)
        return self._rows

    def settle(self, request: Request, proposal: Proposal, kept: Sequence[int], size: int) -> None:
        """The request's figures after the target kept ``kept`` tokens of a block that
        checked the first ``size`` proposals: a proposal past ``size`` was never looked at,
        and a bonus token that happens to equal one is not an acceptance."""
        matched = _leading_matches(proposal.tokens, kept)
        checked = min(len(kept), size)
        stats = request.draft_stats or NO_DRAFT_STATS
        request.draft_stats = stats.plus(checked, min(matched, checked), len(kept))


def _leading_matches(proposed: Sequence[int], kept: Sequence[int]) -> int:
    n = 0
    while n < min(len(proposed), len(kept)) and proposed[n] == kept[n]:
        n += 1
    return n


def block_size(drafter: Drafter, request: Request, context_length: int) -> int:
    """Draft tokens for ``request``'s next block: none past its ``max_tokens``, the model's
    context or the draft's (a row the draft cannot follow makes the batch's steps plain ones)."""
    left = min(
        request.params.max_tokens - request.next_index,
        context_length - request.history_length,
        drafter.draft.context_length - request.history_length,
    )
    return max(0, min(drafter.tokens, left - 1))


@dataclass(frozen=True)
class Block:
    """What one block did to the target: its events and what its caches must give back."""

    events: list[Event]
    """Each token with its draft record, then each row's ``Finished`` with its figures."""
    kept: int
    """Tokens every row kept (the same for every row)."""
    fed: int
    """Tokens the target's pass was fed per row: the last kept token and the proposals that
    were checked. The caches grew by ``fed`` and hold ``kept`` valid positions of them."""

    @property
    def surplus(self) -> int:
        """Positions to cut from the end of the target's caches: fed, never kept."""
        return self.fed - self.kept


def run_block(
    drafter: Drafter,
    requests: Sequence[Request],
    carries: Sequence[dict | None],
    tokens: int,
    forward: Callable[[mx.array], mx.array],
    sample: Callable[[mx.array], tuple[list[Event], mx.array]],
) -> Block:
    """One block for every row: propose, check in one target pass (``forward``: [B, L] ->
    [B, L, V]), then draw position by position (``sample``: the scheduler's own step on
    [B, V] logits -> its events and the final logits).

    A proposal may be shorter than ``tokens`` (the draft proposed an end of sequence), so
    the pass checks the shortest proposal of the batch: what the target was fed is counted
    here, where it is fed, and the caller cuts its caches by the block's ``surplus``."""
    ordered = drafter.rows.sync(requests, carries)
    proposed = drafter.rows.propose(ordered, tokens, drafter.target.eos_token_ids)
    drafted = {r.id: p for r, p in zip(ordered, proposed, strict=True)}
    proposals = [drafted[r.id] for r in requests]
    size = min(len(p.tokens) for p in proposals)
    inputs = mx.array([[r.generated[-1], *p.tokens[:size]] for r, p in zip(requests, proposals, strict=True)])
    logits = forward(inputs)
    events: list[Event] = []
    kept: list[list[TokenStep]] = [[] for _ in requests]
    rows = {r.id: i for i, r in enumerate(requests)}
    for j in range(size + 1):
        step_events, final = sample(logits[:, j, :])
        target = _target_logprobs(final, proposals, j, size)
        ended = False
        for event in step_events:
            if isinstance(event, TokenStep) and event.request_id in rows:
                row = rows[event.request_id]
                record = _record(proposals[row], j, size, event, target[row])
                ended |= record.outcome is not Outcome.ACCEPTED
                event = dataclasses.replace(event, draft=record)
                kept[row].append(event)
            elif isinstance(event, Finished):
                ended = True
            events.append(event)
        if ended:
            break
    drafter.rows.settle(ordered, size, [kept[rows[r.id]] for r in ordered])
    for request, proposal, row_kept in zip(requests, proposals, kept, strict=True):
        drafter.settle(request, proposal, [s.token_id for s in row_kept], size)
    # A row that finished in this block was told its figures before the block was settled.
    stats = {r.id: r.draft_stats for r in requests}
    events = [dataclasses.replace(e, draft=stats[e.request_id]) if isinstance(e, Finished) else e for e in events]
    return Block(events, len(kept[0]), size + 1)


def _target_logprobs(final: mx.array, proposals: Sequence[Proposal], j: int, size: int) -> list[dict[int, float]]:
    """For each row, the target's logprob (after its chain) of the draft's proposal and
    candidates at position ``j``: one small gather, on the host in one copy."""
    if j >= size:
        return [{} for _ in proposals]
    ids = [[p.tokens[j], *(c.token_id for c in p.steps[j].top)] for p in proposals]
    width = max(len(i) for i in ids)
    index = mx.array([i + [i[0]] * (width - len(i)) for i in ids], dtype=mx.int32)
    logprobs = mx.take_along_axis(final, index, axis=-1) - mx.logsumexp(final, axis=-1, keepdims=True)
    values = logprobs.tolist()
    return [dict(zip(i, v, strict=False)) for i, v in zip(ids, values, strict=True)]


def _record(proposal: Proposal, j: int, size: int, drew: TokenStep, target: dict[int, float]) -> DraftRecord:
    """What decided the token ``drew`` at place ``j`` of a block checking ``size`` proposals."""
    drawn = drew.token_id
    coupling = Coupling.GREEDY if drew.params.greedy else Coupling.SHARED_NOISE
    if j >= size:
        return DraftRecord(Outcome.BONUS, j, size, None, None, None, drawn_token_id=drawn, coupling=coupling)
    step = proposal.steps[j]
    token = proposal.tokens[j]
    top = tuple(
        DraftCandidate(c.token_id, c.text, c.logprob, target.get(c.token_id))
        for c in step.top
        if c.logprob is not None and c.logprob > float("-inf")
    )
    outcome = Outcome.ACCEPTED if drawn == token else Outcome.REJECTED
    return DraftRecord(outcome, j, size, token, step.logprobs[-1], target.get(token), top, drawn, coupling)


__all__ = ["Block", "Drafter", "check_draft", "run_block", "block_size"]
