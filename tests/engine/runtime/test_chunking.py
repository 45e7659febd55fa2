"""Prefill chunk sizes from the measured rate: bounded time per chunk, results unchanged."""

import pytest

from engine.api.errors import EngineError
from engine.api.events import PrefillProgress, TokenStep
from engine.api.params import SamplingParams
from engine.runtime.chunking import (
    ALONE_SECONDS,
    BUSY_SECONDS,
    GPU_ALONE_SECONDS,
    LARGEST,
    SMALLEST,
    ChunkSizer,
    first_size,
)
from engine.runtime.scheduler import Scheduler


def test_sizes_follow_the_rate_and_stay_in_bounds():
    sizer = ChunkSizer()
    assert sizer.size(busy=False) == first_size()
    sizer.record(64, 8.0)  # 8 tokens/s, as this CPU prefills the default model
    assert sizer.size(busy=False) == 4 and sizer.size(busy=True) == SMALLEST
    fast = ChunkSizer()
    fast.record(10_000, 1.0)
    assert fast.size(busy=False) == LARGEST
    assert fast.size(busy=True) == 2048 and fast.size(busy=True) * 1 / 10_000 <= BUSY_SECONDS
    mid = ChunkSizer()
    mid.record(300, 1.0)
    assert mid.size(busy=False) == 64 and mid.size(busy=True) == 64
    assert ChunkSizer(fixed=7).size(busy=True) == 7


def test_sizes_follow_a_falling_rate_at_once_and_grow_slowly():
    """A long prompt gets slower per token as its context grows: a slower chunk is believed
    at once, and a chunk is at most twice the last one, so none runs far past its target
    (a 2,048-token chunk after a quick 16-token one took a second and held up Esc)."""
    sizer = ChunkSizer()
    sizer.record(16, 0.004)  # 4,000 tokens/s on an empty context
    assert sizer.size(busy=False) == 32
    sizer.record(512, 0.05)
    assert sizer.size(busy=False) == 1024
    sizer.record(1024, 1.0)  # the context has grown: 1,024 tokens/s
    assert sizer.size(busy=False) == 256 and ALONE_SECONDS >= 256 / 1024
    sizer.record(256, 0.1)  # faster again: believed halfway
    assert sizer.rate == pytest.approx((1024 + 2560) / 2)


def test_adaptive_prefill_gives_the_same_tokens(tiny):
    prompt = tiny.tokenizer.encode("the cat sat on the mat " * 20)
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=4)
    fixed, adaptive = Scheduler(tiny, prefill_chunk=512), Scheduler(tiny, prefill_chunk=None)
    out = []
    for scheduler in (fixed, adaptive):
        scheduler.insert(prompt, params)
        events = []
        while scheduler.has_work():
            events += scheduler.step()
        out.append(([e.token_id for e in events if isinstance(e, TokenStep)], events))
    assert out[0][0] == out[1][0]
    chunks = [e.done for e in out[1][1] if isinstance(e, PrefillProgress)]
    assert chunks[-1] == len(prompt) and len(chunks) >= 2  # the first chunk is small, then sized


@pytest.mark.parametrize("bad", [0, -3, 1.5, True])
def test_bad_chunk_sizes_are_refused(tiny, bad):
    with pytest.raises(EngineError, match="prefill_chunk"):
        Scheduler(tiny, prefill_chunk=bad)


def test_a_gpu_alone_reads_whole_prompts_up_to_mlx_lms_prefill_step():
    """On a GPU a chunk costs its launches: with nothing else running a prompt goes in
    mlx-lm's prefill steps (2,048 tokens), busy it is sized for the decoding rows."""
    gpu = ChunkSizer(gpu=True)
    assert gpu.size(busy=False) == LARGEST == 2048
    gpu.record(2048, 5.0)  # cold: its graph was being built
    assert gpu.size(busy=False) == LARGEST
    gpu.record(2048, 4.0)  # warm, and slow (a large model): 512 tokens/s
    assert gpu.size(busy=False) == 512 and 512 / gpu.rate <= GPU_ALONE_SECONDS
    assert gpu.size(busy=True) == 128  # 0.25 s of the decoding rows
    fast = ChunkSizer(gpu=True)
    fast.record(2048, 0.02)
    fast.record(2048, 0.01)
    assert fast.size(busy=False) == LARGEST and fast.size(busy=True) == 2048
    assert ChunkSizer(gpu=False).size(busy=False) == 16


def test_a_shape_run_for_the_first_time_does_not_set_the_rate_once_one_is_warm():
    """The first run of a chunk size includes building its graph: it seeds the rate only
    until a chunk of a size run before is measured, which replaces it outright."""
    sizer = ChunkSizer(gpu=False)
    sizer.record(16, 1.6)  # cold: 10 tokens/s, mostly graph building
    assert sizer.rate == 10 and not sizer.warm
    sizer.record(16, 0.016)  # the same shape, warm: 1,000 tokens/s, believed at once
    assert sizer.rate == 1000 and sizer.warm
    sizer.record(32, 3.2)  # a new shape's first run, slow: not the rate
    assert sizer.rate == 1000
    sizer.record(32, 0.064)  # warm and slower (the context grew): believed at once
    assert sizer.rate == 500


def _run(scheduler: Scheduler, prompt, params, cancel_after: int | None = None):
    """Every step's prefill progress, whether a chunk was queued after it, and the tokens."""
    rid = scheduler.insert(prompt, params)
    progress, queued, tokens = [], [], []
    while scheduler.has_work():
        events = scheduler.step()
        progress += [e.done for e in events if isinstance(e, PrefillProgress)]
        queued.append(scheduler.prompts._queued is not None)
        tokens += [e.token_id for e in events if isinstance(e, TokenStep) and e.request_id == rid]
        if cancel_after is not None and len(progress) == cancel_after:
            scheduler.cancel(rid)
            cancel_after = None
    return progress, queued, tokens


def test_the_next_chunk_is_queued_before_a_chunk_is_waited_for_and_nothing_changes(tiny):
    """Each step of a long prompt builds the next chunk's graph and queues it before it waits
    for its own: it reports only the chunks waited for, and the reply is the one a single
    chunk gives."""
    prompt = tiny.tokenizer.encode("the cat sat on the mat " * 20)
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=4)
    progress, queued, tokens = _run(Scheduler(tiny, prefill_chunk=32), prompt, params)
    assert progress == [*range(32, len(prompt), 32), len(prompt)]
    chunks = len(progress)
    assert queued[: chunks - 1] == [True] * (chunks - 1) and not any(queued[chunks - 1 :])
    _, _, whole = _run(Scheduler(tiny, prefill_chunk=512), prompt, params)
    assert tokens == whole


def test_a_cancel_with_a_chunk_queued_stores_what_the_caches_hold(tiny):
    """Cancelled after two chunks (a third queued behind them): the prefix store holds the
    three, and the same prompt again reads only the rest and gives the same reply."""
    prompt = tiny.tokenizer.encode("the cat sat on the mat " * 20)
    params = SamplingParams(max_tokens=6, temperature=0.0)
    scheduler = Scheduler(tiny, prefill_chunk=32)
    progress, _, _ = _run(scheduler, prompt, params, cancel_after=2)
    assert progress == [32, 64] and scheduler.prompts._queued is None
    again, _, tokens = _run(scheduler, prompt, params)
    assert again[0] == 128  # 96 from the store, then one chunk
    _, _, fresh = _run(Scheduler(tiny, prefill_chunk=512), prompt, params)
    assert tokens == fresh
