"""Scoring a text that shares its beginning with one scored before takes that beginning's
steps and caches (``engine.analysis.scored_texts``): the choices of one multiple-choice item
prefill their shared context once, and every number equals the text scored on its own."""

from __future__ import annotations

import pytest

from engine.analysis.score import score
from engine.analysis.scored_texts import ScoredTexts, plain
from engine.api.events import PrefillProgress, ScoreDone, TokenStep
from engine.api.params import SamplingParams
from engine.caches import batch as kv
from engine.runtime.scheduler import Scheduler

CONTEXT = "Question: which of these is a colour of the sky on a clear day? Answer:"
CHOICES = [" blue", " a green field", " the colour of the deep sea at night", " red"]
GREEDY = SamplingParams(temperature=0.0, top_logprobs=5)
EVERY_STAGE = SamplingParams(
    temperature=0.8, top_k=20, top_p=0.9, min_p=0.02, repetition_penalty=1.2, dry_multiplier=0.8, seed=3, top_logprobs=5
)
WIDE_HEADS = {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}
MIROSTAT = SamplingParams(samplers=("temperature", "mirostat_v2"), mirostat_tau=3.0, top_logprobs=5)


@pytest.fixture(scope="module")
def scheduler(tiny) -> Scheduler:
    return Scheduler(tiny)


def ids(scheduler: Scheduler, text: str) -> list[int]:
    return list(scheduler.loaded.tokenizer.encode(text))


def events(scheduler, tokens, params, kept=None, chunk=64):
    return score(
        scheduler.loaded, tokens[:1], tokens[1:], params, scheduler.vocabulary, scheduler.text, chunk, 0, 0, kept
    )


def run(scheduler, tokens, params, kept=None, chunk=64) -> tuple[list[TokenStep], ScoreDone]:
    got = list(events(scheduler, tokens, params, kept, chunk))
    return [e for e in got if isinstance(e, TokenStep)], got[-1]


def numbers(steps: list[TokenStep]) -> list[tuple]:
    """Everything a step reports that the model and the chain computed."""
    return [
        (s.index, s.position, s.token_id, s.text, s.logprobs, s.entropies, s.survivors, s.rank, s.top) for s in steps
    ]


def shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("params", [GREEDY, EVERY_STAGE, MIROSTAT], ids=["greedy", "every-stage", "mirostat"])
def test_each_choice_after_the_first_scores_only_its_continuation_with_the_same_numbers(scheduler, params):
    kept = ScoredTexts()
    texts = [ids(scheduler, CONTEXT + c) for c in CHOICES]
    for i, tokens in enumerate(texts):
        alone, alone_done = run(scheduler, tokens, params)
        steps, done = run(scheduler, tokens, params, kept)
        assert numbers(steps) == numbers(alone), f"choice {i}"
        assert (done.tokens, done.perplexity) == (alone_done.tokens, alone_done.perplexity)
        # The first computes everything; each later one takes what it shares with the longest
        # kept text but its last shared token, whose logits start the rest.
        longest = max((shared(tokens, t) for t in texts[:i]), default=0)
        assert done.cached_tokens == max(0, min(longest, len(tokens)) - 1)
        assert alone_done.cached_tokens == 0
    assert all(done.cached_tokens > 10 for done in [run(scheduler, t, params, kept)[1] for t in texts])


def test_a_choice_started_beside_the_first_takes_what_its_first_chunk_computed(scheduler):
    """The serving loop scores the choices of one request a chunk each in turn: the second
    begins after the first's first chunk, and finds it."""
    kept = ScoredTexts()
    first, second = (ids(scheduler, CONTEXT + c) for c in CHOICES[2:0:-1])
    a, b = events(scheduler, first, GREEDY, kept, chunk=8), events(scheduler, second, GREEDY, kept, chunk=8)
    # The first chunk: its progress, its 8 steps, and past them (where the text is kept as
    # far as it got) to the second chunk's progress.
    got_a = [next(a) for _ in range(10)]
    got_b = list(b)
    got_a += list(a)
    assert got_b[-1].cached_tokens == 8  # what the first's first chunk fed
    assert got_a[-1].cached_tokens == 0
    for tokens, got in ((first, got_a), (second, got_b)):
        alone, _ = run(scheduler, tokens, GREEDY, chunk=8)
        assert numbers([e for e in got if isinstance(e, TokenStep)]) == numbers(alone)


def test_other_settings_a_stopped_text_and_a_quantized_cache_share_nothing_wrong(scheduler, tmp_path):
    from engine.api.kv_quantization import KVQuantization
    from engine.models.load import load
    from tests.support.tiny_archs import write_tiny_arch

    kept = ScoredTexts()
    tokens = ids(scheduler, CONTEXT + CHOICES[0])
    run(scheduler, tokens, GREEDY, kept)
    assert run(scheduler, tokens, GREEDY.with_changes(top_k=3), kept)[1].cached_tokens == 0
    assert run(scheduler, tokens, GREEDY, kept)[1].cached_tokens == len(tokens) - 1
    # A text stopped after its first chunk leaves what it computed, which is all still right.
    kept = ScoredTexts()
    stopped = events(scheduler, tokens, GREEDY, kept, chunk=4)
    for _ in range(6):  # the first chunk's progress, its 4 steps and the second's progress
        next(stopped)
    stopped.close()
    steps, done = run(scheduler, tokens, GREEDY, kept, chunk=4)
    assert done.cached_tokens == 4 and numbers(steps) == numbers(run(scheduler, tokens, GREEDY, chunk=4)[0])
    # A quantized KV cache converts at a token that depends on the chunks: never shared.
    # (Heads 64 wide: the tiny model's 16 are narrower than any group size.)
    wide = write_tiny_arch(tmp_path / "llama64", "llama", overrides=WIDE_HEADS)
    quantized = Scheduler(load(str(wide), kv=KVQuantization(8)))
    kept, numbered = ScoredTexts(), list(range(5, 45))
    run(quantized, numbered, GREEDY, kept)
    assert run(quantized, numbered, GREEDY, kept)[1].cached_tokens == 0 and len(kept) == 0
    assert plain(kv.new_request_cache(scheduler.loaded.model, scheduler.loaded.kv))
    assert not plain(kv.new_request_cache(quantized.loaded.model, quantized.loaded.kv))


def test_the_store_keeps_its_capacity_and_token_budget(scheduler):
    texts = [ids(scheduler, CONTEXT + c) for c in CHOICES]
    kept = ScoredTexts(capacity=2)
    for tokens in texts:
        run(scheduler, tokens, GREEDY, kept)
    assert len(kept) == 2
    kept = ScoredTexts(max_tokens=len(texts[0]) + 1)
    for tokens in texts:
        run(scheduler, tokens, GREEDY, kept)
    assert len(kept) == 1  # the newest stays even over the budget
    assert run(scheduler, texts[-1], GREEDY, kept)[1].cached_tokens == len(texts[-1]) - 1


def in_turn(generators: list) -> list[list]:
    """Each generator a chunk at a time, in turn, as the serving loop runs its scorings
    (``engine.serve.engine_loop``: a progress ends a turn)."""
    got: list[list] = [[] for _ in generators]
    live = dict(enumerate(generators))
    while live:
        for i, gen in list(live.items()):
            for event in gen:
                got[i].append(event)
                if isinstance(event, (PrefillProgress, ScoreDone)):
                    break
            if got[i] and isinstance(got[i][-1], ScoreDone):
                del live[i]
    return got


def test_choices_sent_together_wait_for_the_first_and_share_its_context(scheduler):
    kept = ScoredTexts()
    texts = [ids(scheduler, CONTEXT + c) for c in CHOICES]
    got = in_turn([events(scheduler, t, GREEDY, kept, chunk=8) for t in texts])
    context = min(shared(texts[0], t) for t in texts[1:])
    assert got[0][-1].cached_tokens == 0
    assert all(g[-1].cached_tokens >= context - 1 for g in got[1:])
    for tokens, g in zip(texts, got, strict=True):
        assert numbers([e for e in g if isinstance(e, TokenStep)]) == numbers(
            run(scheduler, tokens, GREEDY, chunk=8)[0]
        )
    # A consumer that reads one text to its end before the next never waits on another.
    kept = ScoredTexts()
    first = events(scheduler, texts[0], GREEDY, kept, chunk=8)
    next(first)  # begun, not advanced again
    steps, done = run(scheduler, texts[1], GREEDY, kept, chunk=8)
    assert done.cached_tokens == 0 and numbers(steps) == numbers(run(scheduler, texts[1], GREEDY, chunk=8)[0])
