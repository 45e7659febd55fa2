"""Settings per phase (issue 26) on the tiny Qwen3-style model: ``think_variant`` applies
from exactly the token after the end-of-thinking marker, as a live change does (the same
tokens as ``update_params`` sent at that moment, penalty window and DRY carried over), in
a batch and alone with identical seeded results, and the change is marked as a live
change is; the thinking budget forces the marker at N; the variant is refused before
anything starts."""

from __future__ import annotations

import pytest

from app.model.timeline_series import is_marked
from engine.api.events import TokenStep
from engine.api.params import SamplingParams, SamplingParamsError
from engine.api.reasoning import ANSWER, THINKING, detect_markers
from engine.runtime.prompts import encode_chat
from engine.runtime.scheduler import Scheduler
from tests.support.tiny_reasoning import write_qwen3_style

BUDGET = 4
THINK = SamplingParams(temperature=1.0, seed=7, max_tokens=14, top_logprobs=3, thinking_budget=BUDGET)
# The answer's settings: other temperature and truncation, a penalty window and DRY that
# must see the thinking's tokens (carried over, as a live change carries them).
VARIANT = SamplingParams(
    temperature=0.6,
    top_k=30,
    repetition_penalty=1.5,
    penalty_window=6,
    dry_multiplier=0.8,
    dry_allowed_length=1,
    max_tokens=14,
    top_logprobs=3,
)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory):
    from engine.models.load import load

    return load(str(write_qwen3_style(tmp_path_factory.mktemp("qwen3s") / "tiny-qwen3")))


@pytest.fixture(scope="module")
def prompt(qwen) -> list[int]:
    """A prompt whose template opened the thinking (as Qwen3-Thinking's does)."""
    return encode_chat(qwen.tokenizer, [{"role": "user", "content": "the cat"}]) + list(
        detect_markers(qwen.tokenizer).start
    )


def steps_of(events, rid) -> list[TokenStep]:
    return [e for e in events if isinstance(e, TokenStep) and e.request_id == rid]


def run(scheduler: Scheduler) -> list:
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def alone(qwen, prompt, params) -> list[TokenStep]:
    scheduler = Scheduler(qwen)
    rid = scheduler.insert(prompt, params)
    return steps_of(run(scheduler), rid)


def numbers(steps: list[TokenStep]) -> list[tuple]:
    return [(s.token_id, s.chain, s.logprobs, s.entropies, s.forced, s.phase) for s in steps]


def test_the_variant_applies_from_the_token_after_the_marker_as_a_live_change(qwen, prompt):
    end = detect_markers(qwen.tokenizer).end[0]
    steps = alone(qwen, prompt, THINK.with_changes(think_variant=VARIANT))
    assert [s.phase for s in steps] == [THINKING] * (BUDGET + 1) + [ANSWER] * (14 - BUDGET - 1)
    assert steps[BUDGET].token_id == end and steps[BUDGET].forced
    answer = VARIANT.with_changes(seed=THINK.seed)  # the variant has no seed: the request's
    assert all(s.params == THINK.with_changes(think_variant=VARIANT) for s in steps[: BUDGET + 1])
    assert all(s.params == answer for s in steps[BUDGET + 1 :])
    assert "dry" in steps[BUDGET + 1].chain and "temperature" in steps[BUDGET + 1].chain
    assert is_marked(steps[BUDGET].params, steps[BUDGET + 1].params)  # the timeline marks it
    # The same request without a variant, its settings changed by hand right after the
    # marker arrived: the same tokens and numbers.
    scheduler = Scheduler(qwen)
    rid = scheduler.insert(prompt, THINK)
    events: list = []
    while scheduler.has_work():
        new = scheduler.step()
        events += new
        if any(isinstance(e, TokenStep) and e.request_id == rid and e.index == BUDGET for e in new):
            scheduler.update_params(rid, VARIANT)
    assert numbers(steps) == numbers(steps_of(events, rid))


def test_the_variant_changes_what_follows_the_marker_only(qwen, prompt):
    with_variant = alone(qwen, prompt, THINK.with_changes(think_variant=VARIANT))
    without = alone(qwen, prompt, THINK)
    assert numbers(with_variant[: BUDGET + 1]) == numbers(without[: BUDGET + 1])
    assert [s.token_id for s in with_variant[BUDGET + 1 :]] != [s.token_id for s in without[BUDGET + 1 :]]


def test_a_batch_gives_each_request_what_it_gives_alone(qwen, prompt):
    first = THINK.with_changes(think_variant=VARIANT)
    others = [
        (prompt, THINK.with_changes(seed=2, thinking_budget=2, think_variant=VARIANT.with_changes(top_k=5))),
        (prompt[:-1], SamplingParams(temperature=0.9, seed=5, max_tokens=10, thinking_budget=1)),
        (prompt, SamplingParams(max_tokens=12, thinking_budget=3, think_variant=VARIANT.with_changes(seed=99))),
    ]
    expected = [numbers(alone(qwen, p, params)) for p, params in [(prompt, first), *others]]
    scheduler = Scheduler(qwen)
    ids = [scheduler.insert(prompt, first)]
    events = scheduler.step() + scheduler.step() + scheduler.step()  # the first one already decodes
    ids += [scheduler.insert(p, params) for p, params in others]
    events += run(scheduler)
    assert [numbers(steps_of(events, i)) for i in ids] == expected
    assert steps_of(events, ids[3])[4].params.seed == 99  # a variant's own seed is kept


def test_a_fork_gives_each_variant_its_own_switch(qwen, prompt):
    variants = [THINK.with_changes(think_variant=VARIANT), THINK.with_changes(seed=8, thinking_budget=2)]
    scheduler = Scheduler(qwen)
    ids = scheduler.fork(prompt, variants)
    events = run(scheduler)
    assert [numbers(steps_of(events, i)) for i in ids] == [numbers(alone(qwen, prompt, v)) for v in variants]


def test_the_budget_forces_the_marker_at_n(qwen, prompt):
    end = detect_markers(qwen.tokenizer).end[0]
    for budget in (1, 3, 6):
        steps = alone(qwen, prompt, THINK.with_changes(thinking_budget=budget, max_tokens=budget + 3))
        assert [s.token_id == end for s in steps] == [i == budget for i in range(budget + 3)]
        assert [s.forced for s in steps] == [i == budget for i in range(budget + 3)]
        assert [s.phase for s in steps] == [THINKING] * (budget + 1) + [ANSWER] * 2
    # No budget: the random model never writes the marker in 14 tokens.
    free = alone(qwen, prompt, THINK.with_changes(thinking_budget=None))
    assert len(free) == THINK.max_tokens and all(s.phase == THINKING for s in free)


def test_a_continuation_in_the_thinking_counts_the_thinking_before_it(qwen, prompt):
    """A reply continued after two thinking tokens, a third forced: with a budget of 4 one
    more is drawn, then the marker is forced at index 4."""
    end = detect_markers(qwen.tokenizer).end[0]
    scheduler = Scheduler(qwen)
    rid = scheduler.continue_output(prompt, [101, 102], 103, THINK.with_changes(max_tokens=8))
    steps = steps_of(run(scheduler), rid)
    assert [s.index for s in steps] == list(range(2, 8))
    assert [s.phase for s in steps] == [THINKING] * 3 + [ANSWER] * 3
    assert [s.token_id == end for s in steps] == [i == BUDGET for i in range(2, 8)]


def test_a_variant_a_stage_would_refuse_is_refused_before_anything_starts(qwen, prompt):
    scheduler = Scheduler(qwen)
    with pytest.raises(SamplingParamsError):
        scheduler.insert(prompt, THINK.with_changes(think_variant=SamplingParams(logit_bias={10**6: 1.0})))
    with pytest.raises(SamplingParamsError):
        scheduler.fork(prompt, [THINK, THINK.with_changes(think_variant=SamplingParams(logit_bias={10**6: 1.0}))])
    with pytest.raises(SamplingParamsError):
        scheduler.continue_output(prompt, [], 5, THINK.with_changes(think_variant=SamplingParams(logit_bias={-1: 1.0})))
    assert not scheduler.has_work() and scheduler.request_ids() == []


def test_the_variant_needs_no_thinking_to_end_in_a_reply_without_markers(tiny):
    """A model without markers: the variant never applies, no token has a phase."""
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(tiny.tokenizer.encode("the cat"), THINK.with_changes(think_variant=VARIANT))
    steps = steps_of(run(scheduler), rid)
    assert steps and all(s.params.think_variant == VARIANT and s.phase is None for s in steps)


def test_a_branch_in_the_thinking_keeps_the_thinkings_settings(qwen, prompt):
    """After the switch the request's settings are the variant's; a branch at a thinking
    position continues with the thinking's settings (its variant and budget too), one in
    the answer with the variant's."""
    params = THINK.with_changes(think_variant=VARIANT)
    scheduler = Scheduler(qwen)
    rid = scheduler.insert(prompt, params)
    original = steps_of(run(scheduler), rid)
    in_thinking = scheduler.branch(rid, 2, original[2].token_id)
    steps = steps_of(run(scheduler), in_thinking)
    assert steps[0].forced and numbers(steps[1:]) == numbers(original[3:])  # the same reply, the switch included
    assert steps[0].params == params
    in_answer = scheduler.branch(rid, BUDGET + 2, original[BUDGET + 2].token_id)
    assert steps_of(run(scheduler), in_answer)[0].params == VARIANT.with_changes(seed=THINK.seed)


def test_replaying_a_reply_gives_its_phases(qwen, prompt):
    from engine.analysis.score import score

    scheduler = Scheduler(qwen)
    rid = scheduler.insert(prompt, THINK.with_changes(think_variant=VARIANT))
    generated = steps_of(run(scheduler), rid)
    replayed = [
        e
        for e in score(
            qwen,
            prompt,
            [s.token_id for s in generated],
            [s.params for s in generated],
            scheduler.vocabulary,
            scheduler.text,
        )
        if isinstance(e, TokenStep)
    ]
    assert [s.phase for s in replayed] == [s.phase for s in generated]
    assert [s.phase for s in replayed] == [THINKING] * (BUDGET + 1) + [ANSWER] * (14 - BUDGET - 1)


def test_the_answers_own_max_tokens_does_not_cut_the_reply(qwen, prompt):
    """``max_tokens`` limits the whole reply: a variant's smaller one (the Answer tab's,
    copied before the Thinking tab's was raised) does not end the reply at its first answer
    token; the answer keeps the request's."""
    steps = alone(qwen, prompt, THINK.with_changes(think_variant=VARIANT.with_changes(max_tokens=3)))
    assert len(steps) == THINK.max_tokens
    assert [s.params.max_tokens for s in steps] == [THINK.max_tokens] * THINK.max_tokens
    assert steps[BUDGET + 1].params.temperature == VARIANT.temperature


def test_a_continuation_in_the_answer_continues_with_the_answers_settings(qwen, prompt):
    """The app continues a reply it holds as steps (a token picked in the answer, Compare
    from here) with the panel's settings, the variant in them: the thinking ended in the
    earlier output, so the answer's settings apply from the first token, as in the reply
    it continues."""
    params = THINK.with_changes(think_variant=VARIANT)
    original = alone(qwen, prompt, params)
    at = BUDGET + 3
    output = [s.token_id for s in original[:at]]
    scheduler = Scheduler(qwen)
    rid = scheduler.continue_output(prompt, output, original[at].token_id, params)
    steps = steps_of(run(scheduler), rid)
    answer = VARIANT.with_changes(seed=THINK.seed)
    assert [s.params for s in steps] == [answer] * len(steps)
    assert steps[0].forced and numbers(steps[1:]) == numbers(original[at + 1 :])
    [forked] = scheduler.fork_output(prompt, output, [params])
    assert numbers(steps_of(run(scheduler), forked)) == numbers(original[at:])


def test_a_live_change_with_the_thinkings_settings_after_the_switch_keeps_the_answers(qwen, prompt):
    """The app sends the panel's settings (the thinking's, its variant in them) when it has
    not yet seen the answer start: once the thinking ended, the variant's apply."""
    params = THINK.with_changes(think_variant=VARIANT)
    changed = THINK.with_changes(think_variant=VARIANT.with_changes(top_k=5))
    scheduler = Scheduler(qwen)
    rid = scheduler.insert(prompt, params)
    events: list = []
    while scheduler.has_work():
        new = scheduler.step()
        events += new
        if any(isinstance(e, TokenStep) and e.request_id == rid and e.index == BUDGET + 1 for e in new):
            scheduler.update_params(rid, changed)
    steps = steps_of(events, rid)
    assert [s.params.temperature for s in steps[BUDGET + 1 :]] == [VARIANT.temperature] * (14 - BUDGET - 1)
    assert steps[-1].params == VARIANT.with_changes(top_k=5, seed=THINK.seed)
