"""A sampling state rewound to its mark is the state made from the history (the draft's
proposals are accepted into its state and taken back once the target has decided).

The reference is the batch made afresh from the history the rewound one ends at
(``SamplingBatch.of``: each stage's state rebuilt token by token). Both are sampled on the
same logits and must give the same tokens, the same inspection and the same carried state,
for every stateful stage: the penalties' counts over a window, DRY's repeats, mirostat's μ,
a grammar's matcher."""

from __future__ import annotations

import json
from functools import cache

import mlx.core as mx
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api.params import SamplingParams
from engine.runtime.text import TokenText
from engine.sampling.batch import SamplingBatch
from engine.stages.dry_state import Breakers, resolve_breakers
from engine.stages.penalty_counts import leaving_token
from engine.stages.vocabulary import Vocabulary

PIECES = ["\n", ":", '"', "*", *(f"w{i}" for i in range(4, 24))]
V = len(PIECES)
CHAINS = (
    ("penalties", "dry", "temperature", "top_k", "top_p", "min_p", "typical_p", "top_n_sigma", "xtc"),
    ("penalties", "dry", "temperature", "mirostat_v2"),
)


@cache
def _breakers(texts: tuple[str, ...]) -> Breakers:
    return resolve_breakers(texts, PIECES, lambda s: [PIECES.index(c) for c in s if c in PIECES])


@st.composite
def _params(draw) -> SamplingParams:
    return SamplingParams(
        temperature=draw(st.sampled_from([0.0, 0.7, 1.3])),
        repetition_penalty=draw(st.sampled_from([1.0, 1.4])),
        presence_penalty=draw(st.sampled_from([0.0, 0.6])),
        frequency_penalty=draw(st.sampled_from([0.0, 0.3])),
        penalty_window=draw(st.sampled_from([0, 1, 3, 8])),
        dry_multiplier=draw(st.sampled_from([0.0, 1.5, 1.5])),
        dry_allowed_length=draw(st.integers(1, 2)),
        mirostat_tau=draw(st.sampled_from([2.0, 4.0])),
        top_logprobs=4,
        seed=draw(st.integers(0, 1000)),
        samplers=draw(st.sampled_from(CHAINS)),
    )


def _batch(vocabulary, params, histories, carries=None) -> SamplingBatch:
    out = SamplingBatch(vocabulary)
    for p, history, carry in zip(params, histories, carries or [None] * len(params), strict=True):
        out.extend(SamplingBatch.of(vocabulary, p, history, carry))
    return out


def _steps(batch, params, histories, logits, forced=None, start=0):
    """Sample each of ``logits`` ([B, V] a step), accept the tokens (``forced`` where given)
    and return the inspections; the histories grow."""
    out = []
    for k, x in enumerate(logits):
        force = None if forced is None else [f[k] for f in forced]
        sampled = batch.sample(mx.array(x), [start + k] * len(params), force)
        rows = sampled.unpack_all(np.array(sampled.packed), [4] * len(params), str, batch.counters())
        leaving = [
            leaving_token(p.penalty_window, h, [r.token_id]) for p, h, r in zip(params, histories, rows, strict=True)
        ]
        batch.accept([r.token_id for r in rows], leaving, rows)
        for h, r in zip(histories, rows, strict=True):
            h.append(r.token_id)
        out.append(rows)
    return out


def _same(a: SamplingBatch, b: SamplingBatch, x: np.ndarray, index: int) -> None:
    one, two = a.sample(mx.array(x), [index] * len(a)), b.sample(mx.array(x), [index] * len(b))
    assert np.array_equal(np.array(one.tokens), np.array(two.tokens))
    assert np.allclose(np.array(one.packed), np.array(two.packed), equal_nan=True)
    assert [a.carry(r) for r in range(len(a))] == [b.carry(r) for r in range(len(b))]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_rewound_state_samples_as_one_made_from_its_history(data):
    rows = data.draw(st.integers(1, 3))
    params = [data.draw(_params()) for _ in range(rows)]
    # Few words, so that DRY finds repeats and the windows drop tokens that come back.
    words = st.integers(4, 8)
    histories = [data.draw(st.lists(words, min_size=1, max_size=12)) for _ in range(rows)]
    proposed, kept = data.draw(st.integers(1, 5)), data.draw(st.integers(0, 5))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    logits = rng.normal(0, 3, (proposed + kept + 1, rows, V)).astype(np.float32)
    forced = [[int(t) for t in rng.integers(4, 9, kept)] for _ in range(rows)]
    vocabulary = Vocabulary(V, _breakers)

    rewound_histories = [list(h) for h in histories]
    rewound = _batch(vocabulary, params, rewound_histories)
    mark = rewound.mark()
    _steps(rewound, params, [list(h) for h in histories], logits[:proposed])  # proposals, forgotten
    rewound.rewind(mark)
    _steps(rewound, params, rewound_histories, logits[proposed:-1], forced, start=1)

    fresh_histories = [list(h) for h in histories]
    fresh = _batch(vocabulary, params, fresh_histories)
    _steps(fresh, params, fresh_histories, logits[proposed:-1], forced, start=1)
    assert rewound_histories == fresh_histories
    _same(rewound, fresh, logits[-1], kept + 1)
    # And as made from the whole history at once (mirostat's μ is carried: the history
    # does not say it).
    carries = [rewound.carry(r) for r in range(rows)]
    _same(rewound, _batch(vocabulary, params, fresh_histories, carries), logits[-1], kept + 1)


def test_a_rewound_grammar_reads_as_one_that_never_saw_the_proposals(tiny):
    """llguidance's matcher, marked and rewound: its mask and its completeness are those of
    a matcher that read only the kept tokens."""
    text = TokenText(tiny.tokenizer)
    vocabulary = Vocabulary.of(tiny, text.piece)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    p = SamplingParams(grammar=("json_schema", json.dumps(schema)), top_logprobs=3)
    kept_ids = tiny.tokenizer.encode('{"a": 1')
    batch = SamplingBatch.of(vocabulary, p, [])
    mark = batch.mark()
    for token in tiny.tokenizer.encode('{"a": 23}'):  # proposals, including a complete object
        batch.accept([token], [None])
    assert batch.states["grammar"].facts(0)[0]
    batch.rewind(mark)
    fresh = SamplingBatch.of(vocabulary, p, [])
    for token in kept_ids:
        batch.accept([token], [None])
        fresh.accept([token], [None])
    x = np.random.default_rng(0).normal(0, 1, (1, vocabulary.size)).astype(np.float32)
    _same(batch, fresh, x, len(kept_ids))
    assert batch.states["grammar"].facts(0) == fresh.states["grammar"].facts(0) == (False, False)
