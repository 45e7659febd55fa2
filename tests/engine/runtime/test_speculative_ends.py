"""Speculative decoding where a reply can end inside a block, with end of sequence allowed.

A draft that "thinks the answer is over" proposes the end of sequence where the target goes
on; its proposal is then shorter than the block asked for, the rows of a batch propose
blocks of different lengths, and a reply may end inside a block (its own end of sequence, a
stop string, its last token). In each case the reply must be the target's own, token for
token and number for number: the reference is the same request run without a draft."""

from __future__ import annotations

import pytest

from engine.api.draft import DraftStats, Outcome
from engine.api.params import SamplingParams
from engine.runtime import draft_rows, speculative
from engine.runtime.requests import new_request
from tests.support.drafts import ending_early, run_requests, token_ids

PROMPTS = ("The cat sat on the mat", "Once upon a time", "A B C D")


def _same_numbers(drafted, plain) -> None:
    """The target's whole inspection of every token, as without a draft."""
    assert token_ids(drafted) == token_ids(plain)
    for a, b in zip(drafted, plain, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        assert a.entropies == pytest.approx(b.entropies, abs=1e-5)
        assert [c.token_id for c in a.top] == [c.token_id for c in b.top]
        assert [c.logprobs for c in a.top] == [pytest.approx(c.logprobs, abs=1e-5) for c in b.top]


def _blocks(monkeypatch, eos) -> list[list[tuple[int, int, bool]]]:
    """Each block the draft proposes from now on: (request id, proposals, whether the last
    is an end of sequence) for every row."""
    seen: list[list[tuple[int, int, bool]]] = []
    propose = draft_rows.DraftRows.propose

    def spy(self, ordered, tokens, ends):
        proposals = propose(self, ordered, tokens, ends)
        seen.append([(r.id, len(p.tokens), p.tokens[-1] in eos) for r, p in zip(ordered, proposals, strict=True)])
        return proposals

    monkeypatch.setattr(draft_rows.DraftRows, "propose", spy)
    return seen


@pytest.mark.parametrize("tokens", [2, 4])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "seeded"])
def test_a_draft_proposing_the_end_where_the_target_goes_on_changes_nothing(tiny, near, tokens, sampled):
    params = SamplingParams(max_tokens=40, top_logprobs=4, **({"temperature": 0.9, "seed": 7} if sampled else {}))
    draft = ending_early(near)
    (plain,), (plain_done,), _ = run_requests(tiny, [(PROMPTS[0], params)])
    (drafted,), (done,), _ = run_requests(tiny, [(PROMPTS[0], params)], draft=draft, tokens=tokens)
    _same_numbers(drafted, plain)
    assert done.finish_reason == plain_done.finish_reason and done.text == plain_done.text
    eos = min(tiny.eos_token_ids)
    refused_ends = [s for s in drafted if s.draft is not None and s.draft.token_id == eos and s.token_id != eos]
    assert refused_ends, "the draft never proposed the end where the target went on: the test tests nothing"
    assert all(s.draft.outcome is Outcome.REJECTED for s in refused_ends)


def test_rows_whose_draft_ends_at_different_places_each_equal_their_reply_alone(tiny, near, monkeypatch):
    """One row's draft proposes the end where the others' go on: the block is cut short
    for every row (the target checks them together), and each row is its own reply."""
    requests = [
        (PROMPTS[0], SamplingParams(max_tokens=30, top_logprobs=3)),
        (PROMPTS[1], SamplingParams(max_tokens=30, top_logprobs=3, temperature=0.8, seed=3, top_k=20)),
        (PROMPTS[2], SamplingParams(max_tokens=30, top_logprobs=3, repetition_penalty=1.3)),
    ]
    blocks = _blocks(monkeypatch, tiny.eos_token_ids)
    together, _, _ = run_requests(tiny, requests, draft=ending_early(near, every=5), tokens=4)
    cut = [b for b in blocks if len(b) == 3 and len({ends for _, _, ends in b}) > 1 and b[0][1] < 4]
    assert cut, "no block was cut short by one row's end of sequence while the others went on"
    monkeypatch.undo()
    for req, steps in zip(requests, together, strict=True):
        (alone,), _, _ = run_requests(tiny, [req])
        _same_numbers(steps, alone)


def test_the_figures_count_only_the_proposals_the_target_checked(tiny, monkeypatch):
    """The draft is the target itself but for the end it proposes: blocks cut short by
    one row's end, blocks whose every proposal was accepted and a bonus token; the figures
    are what the records say was checked and accepted."""
    requests = [(p, SamplingParams(max_tokens=30)) for p in PROMPTS]
    blocks = _blocks(monkeypatch, tiny.eos_token_ids)
    steps_of, done_of, _ = run_requests(tiny, requests, draft=ending_early(tiny, every=4), tokens=4)
    assert len({b[0][1] for b in blocks}) > 1
    for steps, done in zip(steps_of, done_of, strict=True):
        outcomes = [s.draft.outcome for s in steps if s.draft is not None]
        assert done.draft.accepted == outcomes.count(Outcome.ACCEPTED)
        assert done.draft.proposed == outcomes.count(Outcome.ACCEPTED) + outcomes.count(Outcome.REJECTED)
        assert done.draft.tokens == len(outcomes)
        assert done.draft.passes == sum(s.draft.position == 0 for s in steps if s.draft is not None)
        assert all(s.draft.block <= 4 for s in steps if s.draft is not None)


def test_settling_counts_only_the_checked_part_of_a_longer_proposal(tiny):
    """A proposal of four checked up to two (another row's was shorter): the bonus token
    that equals the third proposal is not an acceptance, the fourth was never proposed to
    the target."""
    request = new_request(0, [1] * 5, SamplingParams(), tiny.tokenizer.decode)
    drafter = speculative.Drafter(tiny, tiny, 4, None, None)
    drafter.settle(request, speculative.Proposal([7, 8, 9, 10], [], 5), kept=[7, 8, 9], size=2)
    assert request.draft_stats == DraftStats(proposed=2, accepted=2, passes=1, tokens=3)


def _first_printable(steps, after: int) -> str:
    """The text of the first token after ``after`` that is printable and met nowhere before."""
    text = ""
    for i, step in enumerate(steps):
        if i > after and step.text.isprintable() and step.text.strip() and step.text not in text:
            return step.text
        text += step.text
    raise AssertionError("no printable token to stop at")


def test_a_reply_ending_inside_a_block_leaves_the_other_rows_as_alone(tiny):
    """The target itself ends early (its end of sequence inside a block, proposed and
    accepted), another row asks a stop string met inside a block, a third runs out of
    tokens inside one; the rows left go on as each would alone."""
    ends = ending_early(tiny, every=11, boost=8.0)
    stopping = SamplingParams(max_tokens=60, temperature=0.7, seed=2)
    (plain,), _, _ = run_requests(ends, [(PROMPTS[0], stopping)])
    stop = _first_printable(plain, after=3)
    requests = [
        (PROMPTS[1], SamplingParams(max_tokens=60, top_logprobs=2)),
        (PROMPTS[0], stopping.with_changes(stop=(stop,))),
        (PROMPTS[2], SamplingParams(max_tokens=13, temperature=0.7, seed=2)),
    ]
    together, done, _ = run_requests(ends, requests, draft=ends, tokens=4)
    assert [d.finish_reason.value for d in done] == ["stop", "stop", "length"]
    assert done[0].stop == "<|im_end|>" and done[1].stop == stop
    assert together[0][-1].token_id in tiny.eos_token_ids and together[0][-1].draft is not None
    assert any(s.draft is not None for s in together[1][-2:]) and together[2][-1].draft is not None
    for req, steps, finished in zip(requests, together, done, strict=True):
        (alone,), (alone_done,), _ = run_requests(ends, [req])
        _same_numbers(steps, alone)
        assert (finished.finish_reason, finished.text, finished.stop) == (
            alone_done.finish_reason,
            alone_done.text,
            alone_done.stop,
        )


def test_a_one_token_prompt_joining_after_a_bonus_block_is_its_own_reply(tiny):
    """After a bonus token every row leaves its last two tokens out of the draft's caches; a
    row joining then with a context of two (a one-token prompt and its first token) cannot
    leave as much, and every row is read in again: both replies stay their own."""
    from engine.api.events import TokenStep
    from engine.runtime.scheduler import Scheduler

    params = SamplingParams(max_tokens=24)
    scheduler = Scheduler(tiny, prefill_chunk=512)
    scheduler.set_draft(tiny, 3)  # the model drafting for itself: every block ends with a bonus
    first = scheduler.insert(tiny.tokenizer.encode(PROMPTS[0]), params)
    steps: dict[int, list[TokenStep]] = {first: []}
    while not any(s.draft is not None and s.draft.outcome is Outcome.BONUS for s in steps[first]):
        steps[first] += [e for e in scheduler.step() if isinstance(e, TokenStep)]
    one = [tiny.tokenizer.encode(PROMPTS[1])[0]]
    second = scheduler.insert(one, params)
    steps[second] = []
    while scheduler.has_work():
        for event in scheduler.step():
            if isinstance(event, TokenStep):
                steps[event.request_id].append(event)
    assert any(s.draft is not None for s in steps[second])
    (alone,), _, _ = run_requests(tiny, [(PROMPTS[0], params)])
    _same_numbers(steps[first], alone)
    lone = Scheduler(tiny, prefill_chunk=512)
    rid = lone.insert(one, params)
    reference = []
    while lone.has_work():
        reference += [e for e in lone.step() if isinstance(e, TokenStep) and e.request_id == rid]
    _same_numbers(steps[second], reference)
