"""A row's inspection pack is as wide as its own ``top_logprobs`` asks, not the batch's
widest: a served request asking llama.cpp's ``n_probs`` 100 beside a row asking 5 leaves
that row's pack, and so its inspection, exactly what it is alone (each step packs and unpacks
``2·top_n + 1`` candidates per stage: the wide row must not make every other row pay it)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.api.params import SamplingParams
from engine.sampling.batch import SamplingBatch
from engine.sampling.unpack import to_host
from engine.stages.vocabulary import Vocabulary

VOCAB = 2_048


def _batch(*params: SamplingParams) -> SamplingBatch:
    batch = None
    for p in params:
        one = SamplingBatch.of(Vocabulary(VOCAB), p, [])
        batch = one if batch is None else (batch.extend(one) or batch)
    assert batch is not None
    return batch


def _row(batch: SamplingBatch, logits: np.ndarray, row: int, tops: list[int]):
    sampled = batch.sample(mx.array(logits), [0] * len(logits))
    host = to_host(sampled.packed)
    offset, layout = sampled.places[row]
    inspection = sampled.unpack_all(host, tops, str, batch.counters())[row]
    return layout.width, host[offset : offset + layout.width], inspection


def test_a_row_asking_100_candidates_leaves_another_rows_pack_as_it_is_alone():
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((2, VOCAB)) * 3).astype(np.float32)
    five = SamplingParams(top_logprobs=5, temperature=0.8, top_k=50, seed=1)
    hundred = SamplingParams(top_logprobs=100, temperature=0.8, top_k=50, seed=2)
    width, block, alone = _row(_batch(five), logits[:1], 0, [5])
    mixed = _batch(five, hundred)
    width_beside, block_beside, beside = _row(mixed, logits, 0, [5, 100])
    assert width_beside == width  # the pack of the row asking 5 is not widened
    np.testing.assert_array_equal(block_beside, block)
    assert beside == alone  # its reply and every number of it, exactly
    _, _, wide = _row(mixed, logits, 1, [5, 100])
    assert len(wide.top) >= 100  # the wide row gets what it asked


def test_rows_asking_openais_range_still_share_one_group():
    """Up to OpenAI's 20, rows of one chain are sampled together (one compiled step), as before."""
    rng = np.random.default_rng(6)
    logits = (rng.standard_normal((3, VOCAB)) * 3).astype(np.float32)
    batch = _batch(*(SamplingParams(top_logprobs=n, temperature=0.8, seed=n) for n in (0, 5, 20)))
    sampled = batch.sample(mx.array(logits), [0, 0, 0])
    assert len({id(layout) for _, layout in sampled.places}) == 1
