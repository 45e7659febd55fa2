"""Failures the engine fuzzer (tests/engine/runtime/test_engine_fuzz.py) found, each shrunk to a minimal
reproducer on the tiny model; each was fixed in the engine and stays here as a regular
test (the fuzzer draws these inputs too)."""

import numpy as np
import pytest

from engine.api.errors import EngineError
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.runtime.scheduler import Scheduler

PARAMS = SamplingParams(max_tokens=20)
PROMPT = [5, 6, 7, 8]


def run(scheduler):
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def finished(events, rid) -> Finished:
    (done,) = [e for e in events if isinstance(e, Finished) and e.request_id == rid]
    return done


def steps(events, rid) -> list[TokenStep]:
    return [e for e in events if isinstance(e, TokenStep) and e.request_id == rid]


@pytest.fixture
def running(tiny):
    """Requests 0 and 1, both with a few tokens."""
    scheduler = Scheduler(tiny)
    scheduler.insert(PROMPT, PARAMS)
    scheduler.insert(PROMPT[:2], PARAMS)
    for _ in range(4):
        scheduler.step()
    assert scheduler.request_ids() == [0, 1]
    return scheduler


# Request ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [lambda s: s.branch([0], 0, 1), lambda s: s.fork_from({}, 0, [PARAMS])],
    ids=["branch([0])", "fork_from({})"],
)
def test_an_unhashable_request_id_is_an_engine_error(running, call):
    with pytest.raises(EngineError):
        call(running)
    assert running.request_ids() == [0, 1]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.cancel(True),
        lambda s: s.cancel(1.0),
        lambda s: s.update_params(False, SamplingParams(max_tokens=1)),
        lambda s: s.branch(True, 0, 1),
        lambda s: s.fork_from(0.0, 0, [PARAMS]),
    ],
    ids=["cancel(True)", "cancel(1.0)", "update_params(False)", "branch(True)", "fork_from(0.0)"],
)
def test_a_request_id_that_is_not_an_integer_is_rejected(running, call):
    """Tokens and positions refuse bools and floats (EngineError); request ids should too."""
    before = (running.request_ids(), running.params_of(0), running.params_of(1), running.queue.next_id)
    with pytest.raises(EngineError):
        call(running)
    assert (running.request_ids(), running.params_of(0), running.params_of(1), running.queue.next_id) == before


def test_a_numpy_request_id_is_an_id(running):
    """Still accepted after the fix (prompt tokens accept numpy integers too)."""
    running.update_params(np.int64(1), SamplingParams(max_tokens=3))
    assert running.params_of(1).max_tokens == 3


# continue_output / fork_output input --------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.continue_output(None, [5], 6, PARAMS),
        lambda s: s.continue_output(PROMPT, 7, 6, PARAMS),
        lambda s: s.fork_output(None, [5], [PARAMS]),
        lambda s: s.continue_output({5: 1, 6: 2}, [7], 8, PARAMS),
        lambda s: s.continue_output(PROMPT, {7, 8}, 9, PARAMS),
        lambda s: s.fork_output(PROMPT, {7: 1}, [PARAMS]),
    ],
    ids=["continue(None)", "continue(output=7)", "fork_output(None)", "continue(dict)", "continue(set)", "fork(dict)"],
)
def test_continuations_check_prompt_and_output_like_insert(tiny, call):
    scheduler = Scheduler(tiny)
    with pytest.raises(EngineError):
        call(scheduler)
    assert not scheduler.has_work() and scheduler.queue.next_id == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.insert([5, np.array([3])], PARAMS),
        lambda s: s.fork([np.array([3, 4])], [PARAMS]),
        lambda s: s.continue_output([5], [np.array([3])], 6, PARAMS),
    ],
    ids=["insert", "fork", "continue_output"],
)
def test_a_token_that_is_an_array_is_an_engine_error(tiny, call):
    scheduler = Scheduler(tiny)
    with pytest.raises(EngineError):
        call(scheduler)
    assert not scheduler.has_work() and scheduler.queue.next_id == 0


# Text of continuations ----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["continue_output", "fork_output", "fork_from"])
def test_a_stop_string_inside_the_earlier_output_does_not_end_a_continuation(tiny, how):
    """A compare variant (or a continued reply) that adds a stop string which the text before
    the continuation point already holds: only the new text can stop it."""
    the = tiny.tokenizer.encode(" the")  # one token
    x, y = tiny.tokenizer.encode("x")[0], tiny.tokenizer.encode("y")[0]
    only_xy = {x: 50.0, y: 50.0}  # the reply can never write "the" itself
    params = SamplingParams(max_tokens=len(the) + 4, stop=("the",), logit_bias=only_xy)
    scheduler = Scheduler(tiny)
    if how == "continue_output":
        rid = scheduler.continue_output(PROMPT, the, x, params)
    elif how == "fork_output":
        (rid,) = scheduler.fork_output(PROMPT, the, [params])
    else:
        original = scheduler.continue_output(PROMPT, [], the[0], SamplingParams(max_tokens=3))
        run(scheduler)
        (rid,) = scheduler.fork_from(original, len(the), [params])
    events = run(scheduler)
    done = finished(events, rid)
    assert done.finish_reason == "length" and done.generated_tokens == 4
    assert done.text == " the" + "".join(s.text for s in steps(events, rid))


def test_a_stop_string_added_by_update_params_does_not_match_text_already_streamed(tiny):
    """update_params applies from the next token: text streamed before it stands."""
    x, y = tiny.tokenizer.encode("x")[0], tiny.tokenizer.encode("y")[0]
    params = SamplingParams(max_tokens=6, logit_bias={y: 100.0})  # "x" (forced), then "yyyyy"
    scheduler = Scheduler(tiny)
    rid = scheduler.continue_output(PROMPT, [], x, params)
    events = []
    while len(steps(events, rid)) < 2:
        events += scheduler.step()
    assert "".join(s.text for s in steps(events, rid)) == "xy"
    scheduler.update_params(rid, params.with_changes(stop=("xy",)))
    events += run(scheduler)
    done = finished(events, rid)
    assert done.finish_reason == "length" and done.generated_tokens == 6
    assert "".join(s.text for s in steps(events, rid)) == done.text == "xyyyyy"


@pytest.mark.parametrize("how", ["continue_output", "fork_output"])
def test_a_continuation_that_completes_a_split_character_keeps_it(tiny, how):
    """Token 140 is the first byte of a two-byte character (U+042A) and token 103 its second:
    a branch, a continued reply or a compare variant placed between them."""
    decode = Scheduler(tiny).text.decode
    assert decode([140]) == "\ufffd" and decode([140, 103]) == "\u042a"
    scheduler = Scheduler(tiny)
    params = SamplingParams(max_tokens=3, logit_bias={103: 100.0})
    if how == "continue_output":
        rid = scheduler.continue_output(PROMPT, [140], 103, params)
    else:
        (rid,) = scheduler.fork_output(PROMPT, [140], [params])
    events = run(scheduler)
    tokens = [s.token_id for s in steps(events, rid)]
    assert tokens[0] == 103
    assert finished(events, rid).text == decode([140, *tokens])


# Text held back when EOS ends a reply --------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "stop", "text"),
    [("z", ("zz",), "z"), (140, (), "\ufffd")],
    ids=["start of a stop string", "incomplete character"],
)
def test_eos_releases_the_text_held_back(tiny, first, stop, text):
    (eos,) = tiny.eos_token_ids
    forced = tiny.tokenizer.encode(first)[0] if isinstance(first, str) else first
    scheduler = Scheduler(tiny)
    rid = scheduler.continue_output(
        PROMPT, [], forced, SamplingParams(max_tokens=5, stop=stop, logit_bias={eos: 100.0})
    )
    events = run(scheduler)
    assert [s.token_id for s in steps(events, rid)] == [forced, eos]
    done = finished(events, rid)
    assert done.finish_reason == "stop" and done.stop == scheduler.text.piece(eos)
    assert "".join(s.text for s in steps(events, rid)) == done.text == text


# Parameters too small for float32 -------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1e-40, seed=1),
        SamplingParams(temperature=1e-300, seed=1),
        SamplingParams(temperature=1.0, repetition_penalty=1e-300, seed=1),
    ],
    ids=["T=1e-40", "T=1e-300", "repetition=1e-300"],
)
def test_a_tiny_temperature_or_repetition_penalty_is_a_limit_not_a_nan(tiny, params):
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params.with_changes(max_tokens=4))
    events = run(scheduler)
    for step in steps(events, rid):
        numbers = [*step.logprobs, *step.entropies, *(x for c in step.top for x in c.logprobs)]
        assert not any(np.isnan(numbers)), f"NaN at token {step.index}"
    if params.repetition_penalty == 1.0:  # T -> 0: the point mass on the argmax, as greedy
        greedy = Scheduler(tiny)
        gid = greedy.insert(prompt, SamplingParams(max_tokens=4))
        assert [s.token_id for s in steps(events, rid)] == [s.token_id for s in steps(run(greedy), gid)]


def test_dry_after_a_truncation_never_empties_the_distribution(tiny):
    """A valid order (DRY last) and valid values: top_k keeps one token, which extends a repeat
    of 29 tokens, so DRY's penalty is 100 * 100 ** 19 (capped exponent) = 1e40 > float32's max."""
    prompt = [70, 71] * 15 + [70]  # two byte tokens that hold no sequence breaker
    params = SamplingParams(
        samplers=("top_k", "dry"),
        top_k=1,
        logit_bias={71: 100.0},  # token 71 is the one top_k keeps, and the one that extends the repeat
        dry_multiplier=100.0,
        dry_base=100.0,
        dry_allowed_length=1,
        max_tokens=1,
        seed=1,
    )
    scheduler = Scheduler(tiny)
    rid = scheduler.insert(prompt, params)
    with np.errstate(over="ignore"):
        (step,) = steps(run(scheduler), rid)
    numbers = [*step.logprobs, *step.entropies, *(x for c in step.top for x in c.logprobs)]
    assert not any(np.isnan(numbers)), (step.chain, step.logprobs, step.entropies)
    assert step.token_id == 71  # drawn: token 0, from a row with no token left


def test_a_finished_fork_leaves_no_divergence_state(tiny):
    x, y = tiny.tokenizer.encode("x")[0], tiny.tokenizer.encode("y")[0]
    variants = [
        SamplingParams(max_tokens=4, logit_bias={x: 100.0}),
        SamplingParams(max_tokens=4, logit_bias={y: 100.0}),
    ]
    scheduler = Scheduler(tiny)
    a, b = scheduler.fork(PROMPT, variants)
    events = run(scheduler)
    assert [s.token_id for s in steps(events, a)] == [x] * 4 and [s.token_id for s in steps(events, b)] == [y] * 4
    assert scheduler.divergence.first_difference == {}
