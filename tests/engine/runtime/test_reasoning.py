"""Reasoning models (issue 26) on a tiny random-weight model with Qwen3's real chat template
and its ``<think>`` / ``</think>`` tokens: the markers and the template's switch, the phase
of every token (complete, cut-off and never-closed thinking; thinking switched off), the
split of a reply, and the phase in the CLI's records. The random weights never write a
marker themselves: a branch's forced first token, a continuation's output and the thinking
budget put them where the test wants them."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.api.reasoning import ANSWER, THINKING, detect_markers, has_thinking_switch
from engine.runtime.prompts import encode_chat
from engine.runtime.reasoning_phase import split_reply
from engine.runtime.scheduler import Scheduler
from tests.support.tiny_model import write_tiny_model
from tests.support.tiny_reasoning import write_qwen3_style

CHAT = [{"role": "user", "content": "the cat"}]


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_qwen3_style(tmp_path_factory.mktemp("qwen3") / "tiny-qwen3")


@pytest.fixture(scope="module")
def qwen(qwen_folder: Path):
    from engine.models.load import load

    return load(str(qwen_folder))


@pytest.fixture(scope="module")
def markers(qwen):
    return detect_markers(qwen.tokenizer)


def run(scheduler: Scheduler) -> list:
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def steps_of(events, rid=None) -> list[TokenStep]:
    return [e for e in events if isinstance(e, TokenStep) and (rid is None or e.request_id == rid)]


def finished(events, rid) -> Finished:
    (done,) = [e for e in events if isinstance(e, Finished) and e.request_id == rid]
    return done


def test_the_markers_are_mlx_lms_and_the_template_has_the_switch(qwen, markers, tmp_path):
    vocab = qwen.tokenizer.get_vocab()
    assert markers.style == "think"
    assert (markers.start_text, markers.end_text) == ("<think>", "</think>")
    assert markers.start == (vocab["<think>"],) and markers.end == (vocab["</think>"],)
    assert markers.template_switch and has_thinking_switch(qwen.tokenizer)
    from engine.models.load import load

    plain = load(str(write_tiny_model(tmp_path / "plain")))
    assert detect_markers(plain.tokenizer) is None and not has_thinking_switch(plain.tokenizer)


def test_enable_thinking_reaches_the_template(qwen):
    text = qwen.tokenizer._tokenizer.decode  # noqa: SLF001
    on, off, default = (encode_chat(qwen.tokenizer, CHAT, value) for value in (True, False, None))
    assert text(on).endswith("<|im_start|>assistant\n")
    assert text(off).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert default == on  # mlx-lm's default for a model with think tags: thinking on


def test_a_model_without_markers_has_no_phase(tiny):
    scheduler = Scheduler(tiny)
    assert scheduler.reasoning is None
    rid = scheduler.insert(tiny.tokenizer.encode("the cat"), SamplingParams(max_tokens=3))
    assert [s.phase for s in steps_of(run(scheduler), rid)] == [None] * 3


def test_complete_thinking_opened_by_the_model(qwen, markers):
    """The model writes ``<think>`` (forced here as a branch's first token), thinks, the
    budget of 4 closes it with ``</think>`` after 4 thinking tokens (the marker not
    counted), and the answer follows."""
    scheduler = Scheduler(qwen)
    prompt = encode_chat(qwen.tokenizer, CHAT)
    params = SamplingParams(max_tokens=9, thinking_budget=4, seed=3, temperature=1.0)
    rid = scheduler.continue_output(prompt, [], markers.start[0], params)
    steps = steps_of(run(scheduler), rid)
    assert [s.phase for s in steps] == [THINKING] * 6 + [ANSWER] * 3
    assert steps[0].token_id == markers.start[0] and steps[0].forced
    assert steps[5].token_id == markers.end[0] and steps[5].forced  # the budget's marker, not drawn
    assert not any(s.forced for s in steps[1:5] + steps[6:])
    parts = split_reply(markers, *zip(*[(s.token_id, s.text, s.phase) for s in steps], strict=True))
    assert (parts.thinking_tokens, parts.answer_tokens) == (6, 3)
    texts = [s.text for s in steps]
    assert parts.thinking == "".join(texts[1:5]).strip("\n")
    assert parts.answer == "".join(texts[6:]).lstrip("\n")
    assert "<think>" not in parts.thinking + parts.answer and "</think>" not in parts.thinking


def test_thinking_opened_by_the_prompt_and_cut_off_by_max_tokens(qwen, markers):
    """A template that opens ``<think>`` itself (Qwen3-Thinking's does): the reply starts
    in thinking; ``max_tokens`` ends it there: every token thinking, no answer."""
    scheduler = Scheduler(qwen)
    prompt = encode_chat(qwen.tokenizer, CHAT) + list(markers.start)
    rid = scheduler.insert(prompt, SamplingParams(max_tokens=6, logit_bias={markers.end[0]: -100.0}))
    events = run(scheduler)
    steps = steps_of(events, rid)
    assert [s.phase for s in steps] == [THINKING] * 6
    assert finished(events, rid).finish_reason == "length"
    parts = split_reply(markers, [s.token_id for s in steps], [s.text for s in steps], [s.phase for s in steps])
    assert parts.answer == "" and parts.thinking == "".join(s.text for s in steps).strip("\n")


def test_never_closed_thinking_ends_with_the_reply(qwen, markers):
    """The reply ends (its end-of-turn token) inside the thinking: that token is thinking."""
    scheduler = Scheduler(qwen)
    prompt = encode_chat(qwen.tokenizer, CHAT)
    eos = min(qwen.eos_token_ids)
    output = [markers.start[0], *qwen.tokenizer.encode("hmm")]
    rid = scheduler.continue_output(prompt, output, eos, SamplingParams(max_tokens=20))
    events = run(scheduler)
    (step,) = steps_of(events, rid)
    assert step.index == len(output) and step.phase == THINKING
    assert finished(events, rid).finish_reason == "stop"


def test_thinking_switched_off_is_all_answer_and_the_budget_never_forces(qwen, markers):
    scheduler = Scheduler(qwen)
    prompt = encode_chat(qwen.tokenizer, CHAT, enable_thinking=False)
    rid = scheduler.insert(prompt, SamplingParams(max_tokens=6, thinking_budget=1))
    steps = steps_of(run(scheduler), rid)
    assert [s.phase for s in steps] == [ANSWER] * 6 and not any(s.forced for s in steps)


def test_a_marker_after_the_answer_began_opens_thinking_again(qwen, markers):
    """Phases follow the ids, not a one-way switch: ``<think>`` in the answer is thinking."""
    scheduler = Scheduler(qwen)
    prompt = encode_chat(qwen.tokenizer, CHAT, enable_thinking=False)
    output = qwen.tokenizer.encode("ok")
    rid = scheduler.continue_output(prompt, output, markers.start[0], SamplingParams(max_tokens=len(output) + 3))
    steps = steps_of(run(scheduler), rid)
    assert [s.phase for s in steps] == [THINKING] * 3


def test_the_session_reports_the_markers_and_sets_the_switch(qwen_folder, markers):
    from engine.session.session import EngineSession

    session = EngineSession(prefill_chunk=64)
    info = session.load(str(qwen_folder))
    assert info.reasoning == markers and info.thinking_switch
    on = session.prompt_for(CHAT)
    session.set_enable_thinking(False)
    off = session.prompt_for(CHAT)
    assert off[: len(on)] == on and off[len(on) :] == session.scheduler.loaded.tokenizer.encode(
        "<think>\n\n</think>\n\n", add_special_tokens=False
    )
    with pytest.raises(Exception, match="enable_thinking"):
        session.set_enable_thinking("no")  # type: ignore[arg-type]


def test_think_variant_and_budget_are_validated_and_round_trip():
    from engine.api.params import SamplingParamsError

    variant = SamplingParams(temperature=0.3, logit_bias={5: 1.0}, dry_sequence_breakers=("x",))
    params = SamplingParams(temperature=0.9, think_variant=variant, thinking_budget=100)
    assert SamplingParams.from_dict(params.to_dict()) == params
    assert params.to_dict()["think_variant"]["logit_bias"] == {"5": 1.0}
    with pytest.raises(SamplingParamsError) as nested:
        SamplingParams(think_variant=params)
    assert nested.value.field == "think_variant"
    for bad in (0, -1, 10**7, 2.5, True):
        with pytest.raises(SamplingParamsError) as error:
            SamplingParams(thinking_budget=bad)
        assert error.value.field == "thinking_budget"
    with pytest.raises(SamplingParamsError):
        SamplingParams(think_variant={"temperature": 0.5})  # type: ignore[arg-type]
    with pytest.raises(SamplingParamsError, match="think_variant: logit_bias") as ids:
        SamplingParams(think_variant=SamplingParams(logit_bias={10**6: 1.0})).verify(100)
    assert ids.value.field == "think_variant"


def test_what_the_app_uses_loads_no_mlx():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import engine.api.backend, engine.api.codec, engine.api.reasoning\n"
        "import engine.runtime.reasoning_phase, engine.remote.fields\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
