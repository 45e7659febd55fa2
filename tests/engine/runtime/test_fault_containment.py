"""An exception inside a step ends only the requests of that step; the engine recovers."""

import pytest

from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.runtime.scheduler import Scheduler


class Flaky:
    """The model, failing once on its ``fail_at``-th call."""

    def __init__(self, model, fail_at: int):
        self.model, self.fail_at, self.calls = model, fail_at, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("injected failure")
        return self.model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def drain(scheduler):
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def tokens(events, rid):
    return [e.token_id for e in events if isinstance(e, TokenStep) and e.request_id == rid]


@pytest.mark.parametrize("fail_at", [1, 3, 5, 9])
def test_a_failing_step_ends_only_its_requests_and_the_next_request_works(tiny, fail_at):
    prompt = tiny.tokenizer.encode("the cat sat on the mat")
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=3)
    reference = Scheduler(tiny)
    ref_id = reference.insert(prompt, params)
    expected = tokens(drain(reference), ref_id)

    scheduler = Scheduler(tiny, prefill_chunk=8, sample_ahead=False)
    flaky = Flaky(tiny.model, fail_at)
    scheduler.model = flaky
    first = [scheduler.insert(prompt, params), scheduler.insert(prompt[:5], params)]
    events = drain(scheduler)
    done = {e.request_id: e for e in events if isinstance(e, Finished)}
    assert set(done) == set(first)  # every request finishes exactly once
    errored = [rid for rid in first if done[rid].finish_reason == "error"]
    assert errored and all("injected failure" in done[rid].error for rid in errored)
    for rid in errored:  # the tokens before the failure stand
        assert done[rid].generated_tokens == len(tokens(events, rid))
    mine = tokens(events, first[0])  # same prompt and seed as the clean run: its prefix
    assert mine == expected[: len(mine)]
    assert scheduler._active == [] and len(scheduler._sampling) == 0
    again = scheduler.insert(prompt, params)
    assert tokens(drain(scheduler), again) == expected
