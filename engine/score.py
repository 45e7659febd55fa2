"""Teacher-forced scoring: how the model, and a sampling chain, see a given text.

The text's tokens run through the model in chunked prefill (one forward pass per
chunk); for every scored token the logits that predicted it go through the same stage
chain as generation, with the per-position state rebuilt from the text itself
(penalty counts over the window, DRY's repeats, XTC's coin for that index), and the
token the text has is taken as the drawn one. The numbers therefore equal what
``generate`` reports for the same tokens, and re-scoring a saved reply under other
settings ("replay") is exact: the raw logits depend only on the tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import mlx.core as mx
import numpy as np

from engine import cache as kv
from engine.detokenize import StreamDecoder
from engine.dry import Breakers, DryRow
from engine.errors import EngineError
from engine.events import PrefillProgress, ScoreDone, TokenStep
from engine.inspection import pack_step, to_host, unpack_row
from engine.models import LoadedModel
from engine.params import SamplingParams
from engine.penalties import count_tokens, leaving_token
from engine.requests import check_prompt
from engine.sampler import columns, group_aliases, group_chain, run_chain, xtc_coin
from engine.stages import row_chain
from engine.text import TokenText

ScoreEvent = TokenStep | PrefillProgress | ScoreDone


def check_score_input(context: Sequence[int], targets: Sequence[int], loaded: LoadedModel) -> list[int]:
    """The whole sequence, checked like a prompt; the context must hold at least one token."""
    if not context:
        raise EngineError("scoring needs at least one token of context before the scored text.")
    if not targets:
        raise EngineError("there is no token to score (a plain text needs at least two tokens).")
    return check_prompt(list(context) + list(targets), loaded.vocab_size, loaded.context_length + 1)


def score(
    loaded: LoadedModel,
    context: Sequence[int],
    targets: Sequence[int],
    params: SamplingParams | Sequence[SamplingParams],
    breakers: Callable[[tuple[str, ...]], Breakers],
    text: TokenText,
    chunk: int = 128,
    index_offset: int = 0,
    request_id: int = 0,
) -> Iterator[ScoreEvent]:
    """Yield, chunk by chunk, a PrefillProgress and the TokenSteps of the scored tokens
    (``index`` from ``index_offset``), then one ScoreDone. Stop iterating to cancel.

    ``params``: one set for every token, or one per target token (a reply whose settings
    changed while it was written, replayed under its own settings: each change applies as
    a live change does in generation, recounting a new penalty window and rebuilding DRY's
    state for new breakers)."""
    full = check_score_input(context, targets, loaded)
    per_token = _per_token(params, len(targets), loaded.vocab_size)
    began = time.perf_counter()
    start = len(context)
    state = _PositionState(full, start, per_token[0], breakers, loaded.vocab_size)
    decoder = StreamDecoder(text.decode)
    caches = kv.new_request_cache(loaded.model)
    nll: list[float] = []
    # Position p (start <= p < len(full)) is predicted by the logits at p - 1.
    for a in range(0, len(full) - 1, chunk):
        b = min(a + chunk, len(full) - 1)
        logits = loaded.model(mx.array(full[a:b])[None], cache=caches)[0]
        rows = [p for p in range(a + 1, b + 1) if p >= start]
        yield PrefillProgress(request_id, b, len(full) - 1)
        if not rows:
            kv.eval_caches(caches)
            continue
        for run in _runs(rows, [per_token[p - start] for p in rows]):
            indices = [index_offset + p - start for p in run]
            state.set_params(per_token[run[0] - start])
            steps = _score_rows(logits[run[0] - 1 - a :], run, indices, full, state, text, decoder)
            for p, step in zip(run, steps, strict=True):
                nll.append(-step.raw_logprob)
                yield _with_index(step, request_id, index_offset + p - start, p)
    elapsed = time.perf_counter() - began
    mean = sum(nll) / len(nll)
    yield ScoreDone(
        request_id=request_id,
        tokens=len(nll),
        perplexity=math.exp(mean),
        mean_surprisal_bits=mean / math.log(2),
        tokens_per_second=round(len(nll) / elapsed, 2) if elapsed > 0 else 0.0,
    )


def _per_token(params: SamplingParams | Sequence[SamplingParams], n: int, vocab: int) -> list[SamplingParams]:
    """One checked set per target token (a seed of None reads as 0: only XTC's coin reads
    it, and scoring draws nothing)."""
    listed = [params] * n if isinstance(params, SamplingParams) else list(params)
    if len(listed) != n:
        raise EngineError(f"got {len(listed)} sets of settings for {n} tokens to score.")
    for p in {id(p): p for p in listed}.values():
        p.verify(vocab)
    return [p.with_changes(seed=0) if p.seed is None else p for p in listed]


def _runs(rows: list[int], params: list[SamplingParams]) -> Iterator[list[int]]:
    """Consecutive rows that share their settings (each run is one pass through the chain)."""
    run = [rows[0]]
    for i in range(1, len(rows)):
        if params[i] != params[i - 1]:
            yield run
            run = []
        run.append(rows[i])
    yield run


class _PositionState:
    """Penalty counts and DRY state at each scored position, built from the text as it goes."""

    def __init__(self, full: list[int], start: int, params: SamplingParams, breakers, vocab: int) -> None:
        self.full, self.params, self.vocab, self.breakers = full, params, vocab, breakers
        self.position = start
        self.counts = count_tokens(full[:start], params.penalty_window, vocab)
        self.dry = DryRow(full[:start], breakers(params.dry_sequence_breakers)) if params.has_dry else None

    def set_params(self, params: SamplingParams) -> None:
        """A change from this position on, as ``SamplingBatch.set_params`` makes it live."""
        old, self.params = self.params, params
        history = self.full[: self.position]
        if params.penalty_window != old.penalty_window:
            self.counts = count_tokens(history, params.penalty_window, self.vocab)
        if not params.has_dry:
            self.dry = None
        elif self.dry is None or params.dry_sequence_breakers != old.dry_sequence_breakers:
            self.dry = DryRow(history, self.breakers(params.dry_sequence_breakers))

    def rows(self, positions: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """[L, V] counts and [L, V] DRY penalties for consecutive positions."""
        counts = np.empty((len(positions), self.vocab), np.int32)
        dry = np.zeros((len(positions), self.vocab), np.float32) if self.dry is not None else None
        for i, p in enumerate(positions):
            assert p == self.position
            counts[i] = self.counts
            if self.dry is not None:
                tokens, values = self.dry.penalties(self.params)
                dry[i, tokens] = values
            self._advance()
        return counts, dry

    def _advance(self) -> None:
        """Move to the next position: the token at this one joins the history."""
        token = self.full[self.position]
        self.position += 1
        self.counts[token] += 1
        leaving = leaving_token(self.params.penalty_window, self.full[: self.position])
        if leaving is not None:
            self.counts[leaving] -= 1
        if self.dry is not None:
            self.dry.accept(token)


def _score_rows(logits, rows, indices, full, state, text, decoder) -> list[TokenStep]:
    params = state.params
    n = len(rows)
    logits = logits[:n]
    chain = group_chain([params])
    inputs = columns([params] * n, chain)
    counts, dry = state.rows(rows)
    if "penalties" in chain:
        inputs["counts"] = mx.array(counts)
    if "dry" in chain:
        inputs["dry"] = mx.array(dry)
    if "bias" in chain:
        bias = np.zeros((1, logits.shape[-1]), np.float32)
        for token, value in params.logit_bias.items():
            bias[0, token] = value
        inputs["bias"] = mx.repeat(mx.array(bias), n, axis=0)
    if "xtc" in chain:
        coins = [xtc_coin(params.seed, index) for index in indices]
        inputs["xtc_coin"] = mx.array(np.asarray(coins, np.float32).reshape(-1, 1))
    targets = mx.array([full[p] for p in rows], dtype=mx.int32)
    result = run_chain(logits, chain, inputs, aliases=group_aliases([params], chain))
    result.tokens = targets
    raw = result.outputs[0]
    rank = mx.sum(raw > mx.take_along_axis(raw, targets[:, None], axis=-1), axis=-1) + 1
    top_n = min(params.top_logprobs, logits.shape[-1])
    packed = pack_step(result, inputs.get("counts"), top_n)
    host = to_host(mx.concatenate([packed.reshape(-1), rank.astype(mx.float32)]))
    packed_rows = host[:-n].reshape(n, -1)
    steps = []
    own_chain = row_chain(params)
    for i, p in enumerate(rows):
        inspection = unpack_row(packed_rows[i], top_n, params.top_logprobs, own_chain, text.piece)
        token = full[p]
        steps.append(
            TokenStep(
                request_id=0,
                index=0,
                position=p,
                token_id=token,
                text=decoder.add(token),
                piece=text.piece(token),
                chain=inspection.chain,
                logprobs=inspection.logprobs,
                entropies=inspection.entropies,
                survivors=inspection.survivors,
                top=inspection.top,
                params=params,
                forced=True,
                rank=int(host[-n + i]),
            )
        )
    return steps


def _with_index(step: TokenStep, request_id: int, index: int, position: int) -> TokenStep:
    return replace(step, request_id=request_id, index=index, position=position)
