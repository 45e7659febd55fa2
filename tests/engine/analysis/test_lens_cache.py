"""The logit lens on demand from the cached prefix (engine/session/lens.py): a reply the
session wrote is read from a copy of the prefix store's entry, running only the tokens
from the first position asked for, with the same numbers as a full pass; per cache kind
what can be reused; the store and a reply streaming beside it are left as they were."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine.analysis.lens import lens
from engine.api.events import TokenStep
from engine.api.kv_quantization import KVQuantization
from engine.api.params import SamplingParams
from engine.api.results import LensPosition
from engine.session.session import EngineSession
from tests.support.tiny_archs import CONFIGS, WINDOW, write_tiny_arch

MESSAGES = [{"role": "user", "content": "the cat sat"}]
WIDE = {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1}  # heads 64 wide


def session_for(folder, **load) -> EngineSession:
    session = EngineSession()
    session.load(str(folder), **load)
    return session


def reply(session: EngineSession, messages=MESSAGES, max_tokens: int = 12) -> list[int]:
    eos = session.scheduler.loaded.eos_token_ids
    params = SamplingParams(max_tokens=max_tokens, top_logprobs=2, logit_bias={t: -100.0 for t in eos})
    session.start(messages, params)
    out = []
    while session.has_work():
        out += [e.token_id for e in session.step() if isinstance(e, TokenStep)]
    return out


def full_pass(session: EngineSession, messages, output, positions) -> list[LensPosition]:
    """The same rows from one pass over every token (no cache), counted from the reply."""
    prompt = session.prompt_for(messages)
    offset = len(prompt) - 1
    rows = lens(session.scheduler.loaded, prompt + list(output), [offset + p for p in positions], top=5)
    return [row for row in rows]


def assert_same(cached: list[LensPosition], full: list[LensPosition], offset: int, tol: float = 1e-4) -> float:
    worst = 0.0
    for a, b in zip(cached, full, strict=True):
        assert a.position + offset == b.position and a.chosen == b.chosen and a.decided_at == b.decided_at
        for x, y in zip(a.layers, b.layers, strict=True):
            assert [t for t, _ in x.top] == [t for t, _ in y.top]
            diffs = [abs(p - q) for (_, p), (_, q) in zip(x.top, y.top, strict=True)]
            diffs += [abs(x.entropy - y.entropy), abs(x.kl_final - y.kl_final)]
            diffs.append(abs(x.chosen_logprob - y.chosen_logprob))
            worst = max(worst, *diffs)
            assert (x.rank_final_top1, x.rank_chosen) == (y.rank_final_top1, y.rank_chosen)
    assert worst <= tol
    return worst


def store_snapshot(store) -> list[tuple]:
    """Every entry's tokens and arrays, in the store's LRU order."""
    return [
        (e.tokens, [np.array(v) for _, v in tree_flatten([c.state for c in e.caches]) if hasattr(v, "shape")])
        for e in store._entries.values()
    ]


def assert_store_unchanged(before, after) -> None:
    assert [t for t, _ in before] == [t for t, _ in after]
    for (_, a), (_, b) in zip(before, after, strict=True):
        assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_reply_is_read_from_its_cached_prefix_as_from_a_full_pass(tiny_folder):
    session = session_for(tiny_folder)
    output = reply(session)
    offset = len(session.prompt_for(MESSAGES)) - 1
    before = store_snapshot(session.scheduler.prefix_store)
    rows = list(session.lens_reply(MESSAGES, output, top=5))
    # Every position: the cache holds everything before the first (the prompt but its last token).
    assert session.lens_reuse.reused == offset and session.lens_reuse.why == ""
    assert_same(rows, full_pass(session, MESSAGES, output, range(len(output))), offset)
    for k in (1, 5, len(output) - 1, len(output)):  # one position: one token's forward pass
        one = list(session.lens_reply(MESSAGES, output, positions=[k], top=5))
        assert session.lens_reuse.reused == offset + k
        assert_same(one, full_pass(session, MESSAGES, output, [k]), offset)
    assert_store_unchanged(before, store_snapshot(session.scheduler.prefix_store))
    # A text the store never saw: a full pass, and why.
    list(session.lens_text("a dog ran far away", positions=[2]))
    assert session.lens_reuse.reused == 0 and "no cached prefix" in session.lens_reuse.why


def test_reading_between_the_steps_of_a_streaming_reply_changes_neither(tiny_folder):
    """The app reads the lens between scheduler steps on the worker thread: the streaming
    reply is token for token what it is alone, the store keeps its order, the lens its numbers."""
    other = [{"role": "user", "content": "a dog ran"}]
    alone = session_for(tiny_folder)
    reply(alone, MESSAGES)
    expected = reply(alone, other, max_tokens=10)

    session = session_for(tiny_folder)
    output = reply(session, MESSAGES)
    offset = len(session.prompt_for(MESSAGES)) - 1
    eos = session.scheduler.loaded.eos_token_ids
    session.start(other, SamplingParams(max_tokens=10, top_logprobs=2, logit_bias={t: -100.0 for t in eos}))
    rows = session.lens_reply(MESSAGES, output, top=5)
    streamed, read, mid_reply = [], [], False
    while session.has_work():
        streamed += [e.token_id for e in session.step() if isinstance(e, TokenStep)]
        read += list(islice(rows, 2))  # two rows per step
        if len(streamed) >= 3 and not mid_reply:
            mid_reply = True
            keys = [e.tokens for e in session.scheduler.prefix_store._entries.values()]
            list(session.lens_reply(MESSAGES, output, positions=[4]))  # a second reader, mid-reply
            assert [e.tokens for e in session.scheduler.prefix_store._entries.values()] == keys
    read += list(rows)
    assert mid_reply and streamed == expected
    assert_same(read, full_pass(session, MESSAGES, output, range(len(output))), offset)


# What each cache kind gives: the tiny chat prompt is longer than the sliding window, so
# a RotatingKVCache has wrapped within it, and recurrent state cannot be cut back at all.
KINDS = {
    "gemma3_text": "RotatingKVCache",
    "gpt_oss": "RotatingKVCache",
    "qwen3_next": "ArraysCache",
    "lfm2": "ArraysCache",
    "qwen3": "KVCache",
}


@pytest.fixture(scope="module", params=list(KINDS))
def arch_session(request, tmp_path_factory):
    assert set(KINDS) <= set(CONFIGS)
    folder = write_tiny_arch(tmp_path_factory.mktemp(request.param) / request.param, request.param)
    session = session_for(folder)
    return request.param, session, reply(session, max_tokens=14)


def test_each_cache_kind_reuses_what_it_can_and_agrees_with_a_full_pass(arch_session):
    name, session, output = arch_session
    kind = KINDS[name]
    assert kind in session.scheduler.cache_kinds
    prompt = session.prompt_for(MESSAGES)
    offset = len(prompt) - 1
    assert len(prompt) > WINDOW
    for k in (0, 1, 6, len(output)):
        rows = list(session.lens_reply(MESSAGES, output, positions=[k], top=5))
        assert_same(rows, full_pass(session, MESSAGES, output, [k]), offset)
        reused, why = session.lens_reuse.reused, session.lens_reuse.why
        if kind == "KVCache" or k == len(output):
            # Cut back anywhere, or (after the reply) the finished reply's cache holds
            # exactly what comes before: only the position's own token runs.
            assert reused == offset + k
        elif k == 0:  # the prompt's end is one token too many, and it cannot be cut back
            assert reused == 0 and "exactly the tokens it holds" in why
        else:  # the copy kept at the prompt's end: the reply's tokens up to k run
            assert reused == len(prompt) and why == ""
    rows = list(session.lens_reply(MESSAGES, output, positions=[1, 3, 7], top=5))
    assert session.lens_reuse.reused == (offset + 1 if kind == "KVCache" else len(prompt))
    assert_same(rows, full_pass(session, MESSAGES, output, [1, 3, 7]), offset)


def test_a_quantized_kv_cache_is_not_continued(tmp_path):
    folder = write_tiny_arch(tmp_path / "wide", "llama", overrides=WIDE)
    session = session_for(folder, kv=KVQuantization(8, 64))
    output = reply(session)
    rows = list(session.lens_reply(MESSAGES, output, positions=[3], top=5))
    assert session.lens_reuse.reused == 0 and "quantized" in session.lens_reuse.why
    offset = len(session.prompt_for(MESSAGES)) - 1
    assert_same(rows, full_pass(session, MESSAGES, output, [3]), offset, tol=0.0)
    # Below the point where it quantizes, a KV cache is a plain one and is continued.
    session = session_for(folder, kv=KVQuantization(8, 64, start=200))
    output = reply(session)
    list(session.lens_reply(MESSAGES, output, positions=[3], top=5))
    assert session.lens_reuse.reused == offset + 3
