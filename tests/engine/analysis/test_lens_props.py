"""Properties of the logit lens on random token sequences (tiny model): a position read out
together with others (in groups of 1, 3 or 16 positions, or one at a time where the
read-out's values are capped) is the position read alone, and the lens continued from a
cached prefix (the prefix store's copy) is the lens of one full pass."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.analysis import lens as lens_module
from engine.analysis.lens import lens, lens_continued
from engine.caches import batch as kv
from tests.engine.analysis.test_lens_cache import assert_store_unchanged, store_snapshot

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def assert_rows_equal(a, b, tol: float = 1e-4) -> None:
    assert [r.position for r in a] == [r.position for r in b]
    for x, y in zip(a, b, strict=True):
        assert (x.chosen, x.chosen_is_next, x.decided_at) == (y.chosen, y.chosen_is_next, y.decided_at)
        for p, q in zip(x.layers, y.layers, strict=True):
            assert [t for t, _ in p.top] == [t for t, _ in q.top]
            np.testing.assert_allclose([v for _, v in p.top], [v for _, v in q.top], atol=tol)
            assert abs(p.entropy - q.entropy) <= tol and abs(p.kl_final - q.kl_final) <= tol
            assert abs(p.chosen_logprob - q.chosen_logprob) <= tol
            assert (p.rank_final_top1, p.rank_chosen) == (q.rank_final_top1, q.rank_chosen)


@st.composite
def text_and_positions(draw, vocab: int):
    tokens = draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=48))
    positions = sorted(draw(st.sets(st.integers(0, len(tokens) - 1), min_size=1, max_size=len(tokens))))
    return tokens, positions


@SETTINGS
@given(data=st.data())
def test_a_position_read_with_others_is_the_position_read_alone(tiny, data):
    tokens, positions = data.draw(text_and_positions(tiny.vocab_size))
    group = data.draw(st.sampled_from([1, 3, lens_module.GROUP]))
    budget = data.draw(st.sampled_from([1, lens_module.READ_OUT_VALUES]))  # 1: a position at a time
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lens_module, "GROUP", group)  # several groups of read-out rows
        patch.setattr(lens_module, "READ_OUT_VALUES", budget)
        together = list(lens(tiny, tokens, positions, top=5))
    for p in data.draw(st.lists(st.sampled_from(positions), min_size=1, max_size=3, unique=True)):
        (alone,) = lens(tiny, tokens, [p], top=5)
        assert_rows_equal([alone], [next(r for r in together if r.position == p)])


@SETTINGS
@given(data=st.data())
def test_the_lens_from_a_cached_prefix_is_the_lens_of_a_full_pass(tiny, data):
    tokens, positions = data.draw(text_and_positions(tiny.vocab_size))
    held = data.draw(st.integers(1, len(tokens)))  # what a finished request left in the store
    caches = kv.new_request_cache(tiny.model)
    tiny.model(mx.array(tokens[:held])[None], cache=caches)
    kv.eval_caches(caches)
    store = kv.PrefixStore()
    store.add(tokens[:held], caches)
    before = store_snapshot(store)
    reused, copies = store.peek(tokens, positions[0])
    assert reused == min(held, positions[0])
    full = list(lens(tiny, tokens, positions, top=5))
    cached = list(lens_continued(tiny, tokens, positions, 5, reused, copies))
    assert_rows_equal(cached, full)
    assert_store_unchanged(before, store_snapshot(store))
