"""Harmony (gpt-oss) on a tiny random-weight model with gpt-oss's real chat template and
its special tokens (issue 26): the channel markers found by id, the phase of every token
of a reply (the analysis channel thinking, the final channel answer, the headers between
them the end of the thinking), the split, the budget forcing harmony's end of thinking
and ``think_variant`` applied from the first token of the final message."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.api.reasoning import ANSWER, THINKING, detect_markers
from engine.runtime.prompts import encode_chat
from engine.runtime.reasoning_phase import PhaseTracker, split_reply
from engine.runtime.scheduler import Scheduler
from tests.support.tiny_reasoning import write_harmony_style

CHAT = [{"role": "user", "content": "the cat"}]
REPLY = "<|channel|>analysis<|message|>We think.<|end|><|start|>assistant<|channel|>final<|message|>Hi there!<|return|>"


@pytest.fixture(scope="module")
def harmony(tmp_path_factory: pytest.TempPathFactory):
    from engine.models.load import load

    folder: Path = write_harmony_style(tmp_path_factory.mktemp("harmony") / "tiny-gpt-oss")
    return load(str(folder))


@pytest.fixture(scope="module")
def markers(harmony):
    return detect_markers(harmony.tokenizer)


def ids(harmony, text: str) -> list[int]:
    return harmony.tokenizer.encode(text, add_special_tokens=False)


def decode(harmony):
    return lambda tokens: harmony.tokenizer._tokenizer.decode(list(tokens))  # noqa: SLF001


def run(scheduler: Scheduler) -> list:
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def test_the_channel_tokens_are_found_and_the_template_has_no_switch(harmony, markers):
    vocab = harmony.tokenizer.get_vocab()
    assert markers.style == "harmony" and markers.harmony is not None
    assert markers.harmony.message == vocab["<|message|>"] and markers.harmony.channel == vocab["<|channel|>"]
    assert markers.start == tuple(ids(harmony, "<|channel|>analysis<|message|>"))
    assert markers.end == tuple(ids(harmony, "<|end|><|start|>assistant<|channel|>final<|message|>"))
    assert not markers.template_switch  # gpt-oss reads reasoning_effort, not enable_thinking
    assert harmony.tokenizer._tokenizer.decode(encode_chat(harmony.tokenizer, CHAT)).endswith(  # noqa: SLF001
        "<|start|>user<|message|>the cat<|end|><|start|>assistant"
    )


def test_a_whole_reply_by_phase_and_split(harmony, markers):
    prompt = encode_chat(harmony.tokenizer, CHAT)
    tracker = PhaseTracker.after_prompt(markers, prompt, decode(harmony))
    reply = ids(harmony, REPLY)
    phases = [tracker.feed(t) for t in reply]
    final_message = len(
        ids(harmony, "<|channel|>analysis<|message|>We think.<|end|><|start|>assistant<|channel|>final<|message|>")
    )
    assert phases == [THINKING] * final_message + [ANSWER] * (len(reply) - final_message)
    assert tracker.thinking_tokens == len(ids(harmony, "We think."))  # headers are not counted
    pieces = [harmony.tokenizer._tokenizer.decode([t]) for t in reply]  # noqa: SLF001
    parts = split_reply(markers, reply, pieces, phases)
    assert (parts.thinking, parts.answer) == ("We think.", "Hi there!")


def test_a_tool_call_is_answer_and_analysis_again_is_thinking(harmony, markers):
    text = (
        "<|channel|>analysis<|message|>a<|end|>"
        "<|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json<|message|>{}<|call|>"
    )
    tracker = PhaseTracker.after_prompt(markers, encode_chat(harmony.tokenizer, CHAT), decode(harmony))
    phases = [tracker.feed(t) for t in ids(harmony, text)]
    assert phases[-3:] == [ANSWER] * 3  # "{", "}" and <|call|> (a commentary message)
    assert tracker.phase == ANSWER
    for t in ids(harmony, "<|start|>assistant<|channel|>analysis<|message|>"):
        tracker.feed(t)
    assert tracker.phase == THINKING


def test_cut_off_and_never_closed_analysis(harmony, markers):
    """A reply that stops inside its analysis message (max_tokens, or its end token):
    every token thinking, no answer."""
    scheduler = Scheduler(harmony)
    prompt = encode_chat(harmony.tokenizer, CHAT)
    header = ids(harmony, "<|channel|>analysis<|message|>")
    eos = markers.harmony.stops[0]
    cut = scheduler.continue_output(prompt, header, 100, SamplingParams(max_tokens=len(header) + 5))
    ended = scheduler.continue_output(prompt, [*header, 100, 101], eos, SamplingParams(max_tokens=50))
    events = run(scheduler)
    steps = {rid: [e for e in events if isinstance(e, TokenStep) and e.request_id == rid] for rid in (cut, ended)}
    assert [s.phase for s in steps[cut]] == [THINKING] * 5
    assert [s.phase for s in steps[ended]] == [THINKING] and steps[ended][0].token_id == eos


def test_the_budget_forces_harmonys_end_and_the_variant_follows_it(harmony, markers):
    scheduler = Scheduler(harmony)
    prompt = encode_chat(harmony.tokenizer, CHAT)
    header = ids(harmony, "<|channel|>analysis<|message|>")
    variant = SamplingParams(temperature=0.0, repetition_penalty=1.3, max_tokens=40)
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=40, thinking_budget=3, think_variant=variant)
    rid = scheduler.continue_output(prompt, header, 100, params)
    steps = [e for e in run(scheduler) if isinstance(e, TokenStep) and e.request_id == rid]
    n_end = len(markers.end)
    # Thought tokens 100 (forced, the branch's), two drawn; then harmony's end, forced whole.
    assert [s.token_id for s in steps[3 : 3 + n_end]] == list(markers.end)
    assert [s.forced for s in steps[: 3 + n_end]] == [True, False, False] + [True] * n_end
    assert [s.phase for s in steps] == [THINKING] * (3 + n_end) + [ANSWER] * (len(steps) - 3 - n_end)
    assert all(s.params == params for s in steps[: 3 + n_end])
    assert all(s.params == variant.with_changes(seed=3) for s in steps[3 + n_end :])
