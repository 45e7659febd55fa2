"""Teacher-forced scoring: how the model, and a sampling chain, see a given text.

The text's tokens run through the model in chunked prefill (one forward pass per
chunk); for every scored token the logits that predicted it go through the same stage
chain as generation, with every stage's per-position state rebuilt from the text itself
by the stages' own state objects (penalty counts over the window, DRY's repeats, XTC's
coin for that index, mirostat's μ following each scored token in order), and the
token the text has is taken as the drawn one. The numbers therefore equal what
``generate`` reports for the same tokens, and re-scoring a saved reply under other
settings ("replay") is exact: the raw logits depend only on the tokens. With a quantized
KV cache (``LoadedModel.kv``) that holds when it quantizes from the first token (start 0);
with a later start, scoring's chunks may convert the cache at another token than
generation did (docs/ENGINE.md, "Quantized KV cache").
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import mlx.core as mx

from engine.analysis.scored_texts import ScoredTexts, ScoreKey
from engine.api.errors import EngineError
from engine.api.events import PrefillProgress, ScoreDone, TokenStep
from engine.api.grammar import NO_GRAMMAR_STATS
from engine.api.params import SamplingParams
from engine.api.reasoning import detect_markers
from engine.caches import batch as kv
from engine.models.load import LoadedModel
from engine.runtime.detokenize import StreamDecoder
from engine.runtime.reasoning_phase import PhaseTracker
from engine.runtime.requests import check_prompt
from engine.runtime.text import TokenText
from engine.sampling.batch import grammar_facts, new_states, state_inputs, with_facts
from engine.sampling.inspection import layout_of, pack_step
from engine.sampling.sampler import columns, group_aliases, group_chain, group_forms, run_chain
from engine.sampling.unpack import CountOf, to_host, unpack_row, untrusted
from engine.specs import row_chain
from engine.stages import STAGES
from engine.stages.base import Accepted, Rows, StateContext
from engine.stages.grammar import GrammarFacts
from engine.stages.vocabulary import Vocabulary

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
    vocabulary: Vocabulary,
    text: TokenText,
    chunk: int = 128,
    index_offset: int = 0,
    request_id: int = 0,
    kept: ScoredTexts | None = None,
) -> Iterator[ScoreEvent]:
    """Yield, chunk by chunk, a PrefillProgress and the TokenSteps of the scored tokens
    (``index`` from ``index_offset``), then one ScoreDone. Stop iterating to cancel.

    ``params``: one set for every token, or one per target token (a reply whose settings
    changed while it was written, replayed under its own settings: each change applies as
    a live change does in generation, recounting a new penalty window and rebuilding DRY's
    state for new breakers).

    ``kept``: the texts scored before under this model (one set of ``params``): the steps and
    caches of the longest beginning this text shares with one of them are taken, not
    computed again (``ScoreDone.cached_tokens``), and this text is kept there as it goes."""
    full = check_score_input(context, targets, loaded)
    per_token = _per_token(params, len(targets), loaded.vocab_size)
    began = time.perf_counter()
    start = len(context)
    state = _PositionState(full, start, per_token[0], vocabulary)
    decoder = StreamDecoder(text.decode)
    markers = detect_markers(loaded.tokenizer)  # a reasoning reply's phases, as generation gives them
    phases = PhaseTracker.after_prompt(markers, context, text.decode) if markers is not None else None
    # Texts share what they computed only under one set of settings for every token.
    kept = kept if isinstance(params, SamplingParams) else None
    key = ScoreKey(per_token[0], start, index_offset)
    if kept is not None:
        # A text being scored beside this one (the next choice of the same item, in the same
        # request) will soon hold the beginning they share: wait for it, a chunk's turn at a
        # time (a loop that advances its scorings in turn reads a progress as a turn's end).
        for _ in range(kept.rounds_to_wait(key, full, chunk)):
            yield PrefillProgress(request_id, 0, len(full) - 1)
    reused = kept.take(key, full) if kept is not None else None
    caches = reused.caches if reused is not None else kv.new_request_cache(loaded.model, loaded.kv)
    entry = kept.begin(key, caches, full) if kept is not None else None
    try:
        fed = reused.fed if reused is not None else 0
        tally = _Tally()
        sequential = _sequential(per_token[0])
        for step in reused.steps if reused is not None else ():
            # Taken as they were: the states, the decoder and the phases follow the text past them.
            tally.add(step)
            decoder.add(full[step.position])
            if phases is not None:
                phases.feed(full[step.position])
            state.advance(step if sequential else None)
            yield replace(step, request_id=request_id)
        if entry is not None and reused is not None:
            kept.grow(entry, full[: fed + 1], reused.steps)
        # Position p (start <= p < len(full)) is predicted by the logits at p - 1.
        for a in range(fed, len(full) - 1, chunk):
            b = min(a + chunk, len(full) - 1)
            logits = loaded.model(mx.array(full[a:b])[None], cache=caches)[0]
            kv.after_forward(caches, loaded.kv)
            rows = list(range(max(a + 1, start), b + 1))
            yield PrefillProgress(request_id, b, len(full) - 1)
            if not rows:
                kv.eval_caches(caches)
            scored = []
            for run in _runs(rows, [per_token[p - start] for p in rows]) if rows else ():
                indices = [index_offset + p - start for p in run]
                state.set_params(per_token[run[0] - start])
                steps = _score_rows(logits[run[0] - 1 - a :], run, indices, full, state, text, decoder)
                for p, step in zip(run, steps, strict=True):
                    phase = phases.feed(full[p]) if phases is not None else None
                    step = replace(step, request_id=request_id, index=index_offset + p - start, position=p, phase=phase)
                    tally.add(step)
                    scored.append(step)
                    yield step
            if entry is not None:
                kept.grow(entry, full[: b + 1], scored)
        if entry is not None:
            kept.done(entry)
        yield tally.done(request_id, time.perf_counter() - began, fed)
    finally:  # what it got to stays kept; a text that waits for it no longer does
        if entry is not None:
            kept.end(entry)


class _Tally:
    """What a ScoreDone sums over the scored steps, taken or computed."""

    def __init__(self) -> None:
        self.nll: list[float] = []
        self.grammar = None  # the text's figures under a grammar (engine.api.grammar.GrammarStats)

    def add(self, step: TokenStep) -> None:
        self.nll.append(-step.raw_logprob)
        if step.grammar is not None:
            self.grammar = (self.grammar or NO_GRAMMAR_STATS).plus(step.index, step.grammar)

    def done(self, request_id: int, elapsed: float, cached: int) -> ScoreDone:
        mean = sum(self.nll) / len(self.nll)
        return ScoreDone(
            request_id=request_id,
            tokens=len(self.nll),
            perplexity=math.exp(mean),
            mean_surprisal_bits=mean / math.log(2),
            tokens_per_second=round(len(self.nll) / elapsed, 2) if elapsed > 0 else 0.0,
            grammar=self.grammar,
            cached_tokens=cached,
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
    """Consecutive rows that share their settings (each run is one pass through the chain);
    one row at a time through a chain holding a stage whose state reads the step's result
    (mirostat's μ follows the token just scored)."""
    run = [rows[0]]
    for i in range(1, len(rows)):
        if params[i] != params[i - 1] or _sequential(params[i]):
            yield run
            run = []
        run.append(rows[i])
    yield run


def _sequential(params: SamplingParams) -> bool:
    return any(STAGES[name].needs_result for name in group_chain([params]))


class _PositionState:
    """Every stage's state at each scored position, built from the text as it goes: the
    stages' own states (as in generation), for one row, accepting the text's tokens."""

    def __init__(self, full: list[int], start: int, params: SamplingParams, vocabulary: Vocabulary) -> None:
        self.full, self.params = full, params
        self.position = start
        self.states = new_states(StateContext(vocabulary), [params], [full[:start]], [None])

    def set_params(self, params: SamplingParams) -> None:
        """A change from this position on, as ``SamplingBatch.set_params`` makes it live."""
        old, self.params = self.params, params
        history = self.full[: self.position]
        for state in self.states.values():
            state.set_params(0, old, params, history)

    def inputs(self, chain: tuple[str, ...], index: int) -> dict[str, mx.array]:
        """This position's state inputs ([1, ...] each)."""
        return state_inputs(self.states, chain, [self.params], Rows([0], None), [index])

    def counter(self, position: int) -> CountOf:
        """The token counts over the penalty window before ``position`` (at most the
        position reached: a run of positions is unpacked after it advanced through them)."""
        return self.states["penalties"].counter(0, end=position)

    def advance(self, step: TokenStep | None = None) -> GrammarFacts | None:
        """Move to the next position: the token at this one joins the history (with the
        step that scored it, for states that read it). Returns the grammar's facts after it
        (``engine.sampling.batch.grammar_facts``)."""
        token = self.full[self.position]
        self.position += 1
        window = self.params.penalty_window
        leaving = self.full[self.position - window - 1] if 0 < window < self.position else None
        accepted = Accepted(token, leaving) if step is None else Accepted(token, leaving, step.chain, step.logprobs)
        for state in self.states.values():
            state.accept([self.params], [accepted])
        return grammar_facts(self.states, 0)


def _score_rows(logits, rows, indices, full, state, text, decoder) -> list[TokenStep]:
    params = state.params
    n = len(rows)
    logits = logits[:n]
    chain = group_chain([params])
    inputs = columns([params] * n, chain)
    per_position, facts = [], []
    for i in range(n):
        per_position.append(state.inputs(chain, indices[i]))
        if n > 1:  # a run of several positions holds no stage that reads the result
            facts.append(state.advance())
    joined = {}
    for name in chain:
        if STAGES[name].join is not None:
            joined.update(STAGES[name].join(per_position))
    for key in per_position[0]:
        inputs[key] = joined[key] if key in joined else mx.concatenate([p[key] for p in per_position], axis=0)
    targets = mx.array([full[p] for p in rows], dtype=mx.int32)
    aliases, forms = group_aliases([params], chain), group_forms([params], chain)
    result = run_chain(logits, chain, inputs, aliases=aliases, forms=forms)
    result.tokens = targets
    raw = result.outputs[0]
    rank = mx.sum(raw > mx.take_along_axis(raw, targets[:, None], axis=-1), axis=-1) + 1
    top_n = min(params.top_logprobs, logits.shape[-1])
    packed = pack_step(result, top_n, inputs)
    host = to_host(mx.concatenate([packed.reshape(-1), rank.astype(mx.float32)]))
    packed_rows = host[:-n].reshape(n, -1)
    layout = layout_of(result, top_n)
    if untrusted(layout, packed_rows):  # a bias's statistics derived too small to trust: packed whole
        packed_rows = to_host(pack_step(result, top_n, inputs, derive=False))
    steps = []
    own_chain = row_chain(params)
    for i, p in enumerate(rows):
        count_of = state.counter(p)
        inspection = unpack_row(packed_rows[i], layout, params.top_logprobs, own_chain, text.piece, count_of)
        token = full[p]
        steps.append(
            inspection.step(0, 0, p, decoder.add(token), text.piece(token), params, forced=True, rank=int(host[-n + i]))
        )
    if n == 1:
        facts.append(state.advance(steps[0]))
    return [with_facts(step, f) for step, f in zip(steps, facts, strict=True)]
