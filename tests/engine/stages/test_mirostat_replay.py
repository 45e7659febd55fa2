"""Mirostat v2's μ replayed from a reply's own records on the real default model
(V = 49,152): llama.cpp's recursion (``src/llama-sampling.cpp``,
``llama_sampler_mirostat_v2_apply``: keep ``-log2 p <= mu``, at least the top token; draw;
``mu = mu - eta * (-log2 p_drawn - tau)`` with ``p_drawn`` renormalized over the kept
set, in float32) is folded here from each step's reported logprobs alone — the drawn
token's after the stage, each candidate's entering it — and every step's kept set must be
the one that μ gives, but for a candidate within ``BOUNDARY`` bits of μ.

A peaked step of a large vocabulary is where a log Z summed in one pass on a CPU loses the
tail (``engine.stages.base.log_softmax``): the stage then cut with a surprise 1.2e-4 bits
off the reported one. The tiny model's steps do not show it, so this uses the real one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.runtime.scheduler import Scheduler

pytestmark = pytest.mark.slow

BOUNDARY = 1e-5
"""Bits: a candidate this close to μ may fall either side of it in float32."""

TOKENS = 30
LIVE_AT = 12
"""The step after which the live row's τ changes."""

f32 = np.float32


def _rows() -> list[tuple[str, bool, SamplingParams]]:
    """(prompt, chat, params): seeds, prompts and stage orders of their own; the first is
    the reply that kept a token 1.2e-4 bits above μ (seed 1, the poem, τ 3, η 0.1); the
    last has no mirostat, so the batch runs rows with and without the stage."""
    miro = SamplingParams(temperature=1.0, samplers=("temperature", "mirostat_v2"), max_tokens=TOKENS, top_logprobs=100)
    poem, story = "Write a short poem about the sea.", "Once upon a time, in a small village by the river,"
    return [
        (poem, True, miro.with_changes(seed=1, mirostat_tau=3.0, mirostat_eta=0.1)),
        (story, False, miro.with_changes(seed=2, temperature=0.8, mirostat_tau=5.0, mirostat_eta=0.3)),
        (
            "List three facts about the moon.",
            True,
            miro.with_changes(seed=3, samplers=("mirostat_v2", "temperature"), temperature=1.3, mirostat_tau=2.0),
        ),
        (story, False, miro.with_changes(seed=4, mirostat_tau=4.0, mirostat_eta=0.2)),  # τ changes live
        (poem, True, SamplingParams(temperature=0.9, top_k=20, seed=5, max_tokens=TOKENS, top_logprobs=5)),
    ]


def _generate(smollm, sample_ahead: bool) -> list[list[TokenStep]]:
    tok = smollm.tokenizer
    scheduler = Scheduler(smollm, sample_ahead=sample_ahead)
    ids = []
    for text, chat, params in _rows():
        prompt = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        ids.append(scheduler.insert(list(prompt) if chat else tok.encode(text), params))
    steps: dict[int, list[TokenStep]] = {rid: [] for rid in ids}
    count = 0
    while scheduler.has_work():
        for event in scheduler.step():
            if isinstance(event, TokenStep):
                steps[event.request_id].append(event)
        count += 1
        if count == LIVE_AT:
            live = _rows()[3][2]
            scheduler.update_params(ids[3], live.with_changes(mirostat_tau=2.0))
    return [steps[rid] for rid in ids]


def _next_mu(mu: float, tau: float, eta: float, logprob: float) -> float:
    """llama.cpp's update in its float32: ``observed_surprise = -log2f(p)``, ``e =
    observed_surprise - tau``, ``mu = mu - eta * e``."""
    observed = f32(-f32(logprob) / f32(math.log(2.0)))
    return float(f32(mu) - f32(eta) * f32(observed - f32(tau)))


def _misplaced(steps: list[TokenStep]) -> list[tuple[int, int, float, float]]:
    """(step, token, μ, surprise) of each candidate that the step kept or removed against
    the recursion over the records; μ starts at 2τ and follows every drawn token."""
    bad, mu = [], None
    for i, step in enumerate(steps):
        p = step.params
        mu = 2.0 * p.mirostat_tau if mu is None else mu
        at = step.chain.index("mirostat_v2")
        entering = [c.logprobs[at - 1] for c in step.top]
        best = max(x for x in entering if x is not None)
        for c, x in zip(step.top, entering, strict=True):
            if x is None or not math.isfinite(x):
                continue  # removed before the stage
            surprise = -x / math.log(2.0)
            kept = math.isfinite(c.logprobs[at])
            if abs(surprise - mu) > BOUNDARY and kept != (surprise <= mu or x == best):
                bad.append((i, c.token_id, mu, surprise))
        drawn = step.logprob_at("mirostat_v2")
        assert drawn is not None and math.isfinite(drawn), "a drawn token is one mirostat kept"
        mu = _next_mu(mu, p.mirostat_tau, p.mirostat_eta, drawn)
    return bad


@pytest.fixture(scope="module")
def replies(smollm) -> dict[bool, list[list[TokenStep]]]:
    return {sample_ahead: _generate(smollm, sample_ahead) for sample_ahead in (False, True)}


@pytest.mark.parametrize("sample_ahead", [False, True], ids=["in-turn", "sampled-ahead"])
def test_each_kept_set_is_the_one_mu_replayed_from_the_records_gives(replies, sample_ahead):
    rows = replies[sample_ahead]
    assert [len(r) for r in rows] == [TOKENS] * len(rows)
    for row, steps in enumerate(rows[:-1]):
        assert _misplaced(steps) == [], f"row {row}"
    assert all("mirostat_v2" not in s.chain for s in rows[-1])
    live = rows[3]
    assert live[0].params.mirostat_tau == 4.0 and live[-1].params.mirostat_tau == 2.0
    # μ moved the cut: the kept counts vary within a reply.
    assert all(len({s.survivors[s.chain.index("mirostat_v2")] for s in r}) > 3 for r in rows[:-1])


def test_a_reply_sampled_ahead_is_the_reply_sampled_in_turn(replies):
    ahead, plain = replies[True], replies[False]
    assert [[s.token_id for s in r] for r in ahead] == [[s.token_id for s in r] for r in plain]
    assert [[s.logprobs for s in r] for r in ahead] == [[s.logprobs for s in r] for r in plain]
