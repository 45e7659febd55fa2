"""The stage chain inside the scheduler: batch invariance with every stage on and mixed
orders, live changes of order and DRY, DRY state against a rebuild, and branches."""

import numpy as np
import pytest

from engine.api.events import TokenStep
from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams
from engine.runtime.scheduler import Scheduler
from engine.stages.dry_state import DryRow

EVERYTHING = SamplingParams(
    temperature=1.1,
    top_k=60,
    top_p=0.97,
    min_p=0.01,
    typical_p=0.98,
    top_n_sigma=3.0,
    xtc_probability=0.5,
    xtc_threshold=0.02,
    dry_multiplier=1.5,
    dry_allowed_length=1,
    repetition_penalty=1.1,
    dynatemp_range=0.4,
    seed=21,
    max_tokens=16,
    top_logprobs=4,
)


@pytest.fixture
def prompt(tiny):
    return tiny.tokenizer.encode("the cat the cat the cat sat")


def steps_of(scheduler, rid=None):
    steps = []
    while scheduler.has_work():
        steps += [e for e in scheduler.step() if isinstance(e, TokenStep) and (rid is None or e.request_id == rid)]
    return steps


def alone(tiny, prompt, params):
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params)
    return steps_of(scheduler, rid)


def test_every_stage_on_is_batch_invariant_with_mixed_orders(tiny, prompt):
    variants = [
        EVERYTHING,
        EVERYTHING.with_changes(samplers=LLAMA_CPP_SAMPLERS, seed=22),
        SamplingParams(max_tokens=16, repetition_penalty=1.3),
        EVERYTHING.with_changes(samplers=("xtc", "dry", "temperature"), seed=23),
    ]
    scheduler = Scheduler(tiny)
    ids = [scheduler.insert(prompt, p) for p in variants]
    together = steps_of(scheduler)
    for rid, params in zip(ids, variants, strict=True):
        mine = [s for s in together if s.request_id == rid]
        solo = alone(tiny, prompt, params)
        assert [s.token_id for s in mine] == [s.token_id for s in solo]
        assert [s.chain for s in mine] == [s.chain for s in solo]
        np.testing.assert_allclose([s.logprobs[-1] for s in mine], [s.logprobs[-1] for s in solo], atol=1e-5)
    chains = {s.chain for s in together if s.request_id == ids[0]}
    assert any({"dry", "xtc", "top_n_sigma"} <= set(c) for c in chains)
    llama = [s for s in together if s.request_id == ids[1]]
    assert all(s.chain[-1] == "temperature" for s in llama)


def test_live_change_of_order_and_dry_applies_from_the_next_token(tiny, prompt):
    # A four-token alphabet (through logit_bias) makes the output repeat, so DRY acts.
    alphabet = {t: 40.0 for t in prompt[1:5]}
    start = SamplingParams(temperature=0.9, top_k=20, seed=5, max_tokens=12, logit_bias=alphabet)
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, start)
    before = []
    while len(before) < 4:
        before += [e for e in scheduler.step() if isinstance(e, TokenStep)]
    changed = start.with_changes(samplers=("dry", "top_k", "temperature"), dry_multiplier=3.0, dry_allowed_length=1)
    scheduler.update_params(rid, changed)
    after = steps_of(scheduler, rid)
    assert [s.token_id for s in before] == [s.token_id for s in alone(tiny, prompt, start)][:4]
    assert all(s.chain == ("raw", "bias", "temperature", "top_k") for s in before)
    assert all(s.chain == ("raw", "bias", "dry", "top_k", "temperature") for s in after)
    assert after[0].params.samplers == changed.samplers
    # At every later token, DRY's effect equals a DRY state built from the whole history.
    history = list(prompt) + [s.token_id for s in before]
    breakers = scheduler.vocabulary.breakers(changed.dry_sequence_breakers)
    acted = 0
    for step in after:
        tokens, values = DryRow(history, breakers).penalties(changed)
        dry = dict(zip(tokens.tolist(), values.tolist(), strict=True))
        acted += bool(dry)
        i = step.stage_index("dry")
        assert i == 2
        # DRY shifts each logit by -penalty; the logprobs shift by that plus one constant.
        shift = {c.token_id: c.logprobs[i] - c.logprobs[i - 1] for c in step.top}
        free = [t for t in shift if t not in dry]
        for token, delta in shift.items():
            assert delta - shift[free[0]] == pytest.approx(-dry.get(token, 0.0), abs=1e-3)
        history.append(step.token_id)
    assert acted, "the repetitive prompt should give DRY something to penalize"


def test_branch_with_dry_and_xtc_replays_the_original(tiny, prompt):
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, EVERYTHING)
    original = steps_of(scheduler, rid)
    position = 6
    branch = scheduler.branch(rid, position, original[position].token_id)
    replay = steps_of(scheduler, branch)
    assert [s.index for s in replay][0] == position
    assert [s.token_id for s in replay] == [s.token_id for s in original[position:]]
    for a, b in zip(replay[1:], original[position + 1 :], strict=True):
        assert a.chain == b.chain
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
