"""``python -m engine generate`` with a reasoning model (issue 26): ``--thinking-budget``,
``--think-variant``, ``--no-thinking`` and every token record's ``"phase"``, on the tiny
Qwen3-style model (its prompt opens ``<think>`` as plain text: the tokenizer reads the
marker in it, as a thinking template's prompt has it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.api.reasoning import detect_markers
from engine.cli.main import main
from engine.runtime.scheduler import Scheduler
from tests.support.tiny_model import write_tiny_model
from tests.support.tiny_reasoning import write_qwen3_style

FLAGS = ["--temperature", "1.0", "--seed", "4", "--max-tokens", "7", "--top-logprobs", "2"]
VARIANT = {"temperature": 0.0, "repetition_penalty": 1.4}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_qwen3_style(tmp_path_factory.mktemp("qwen3c") / "tiny-qwen3")


def generate(capsys, *argv: str) -> tuple[int, list[dict], str]:
    code = main(["generate", *argv])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_budget_and_variant_from_the_command_line(folder, capsys):
    argv = ["--model", str(folder), "--prompt", "the cat <think>", *FLAGS]
    code, records, err = generate(capsys, *argv, "--thinking-budget", "2", "--think-variant", json.dumps(VARIANT))
    assert code == 0, err
    tokens = [r for r in records if r["type"] == "token"]
    assert [r["phase"] for r in tokens] == ["thinking"] * 3 + ["answer"] * 4
    assert [r["forced"] for r in tokens] == [False, False, True, False, False, False, False]
    assert tokens[2]["text"] == "</think>"
    # The engine's own run of the same settings: the same tokens.
    from engine.models.load import load

    loaded = load(str(folder))
    base = SamplingParams(temperature=1.0, seed=4, max_tokens=7, top_logprobs=2)
    params = base.with_changes(thinking_budget=2, think_variant=base.with_changes(**VARIANT))
    scheduler = Scheduler(loaded)
    rid = scheduler.insert(loaded.tokenizer.encode("the cat <think>"), params)
    expected = []
    while scheduler.has_work():
        expected += [e.token_id for e in scheduler.step() if isinstance(e, TokenStep) and e.request_id == rid]
    assert [r["token_id"] for r in tokens] == expected
    assert detect_markers(loaded.tokenizer).end == (tokens[2]["token_id"],)
    # Without the variant the answer is drawn otherwise.
    code, plain, _ = generate(capsys, *argv, "--thinking-budget", "2")
    assert [r["token_id"] for r in plain if r["type"] == "token"][3:] != expected[3:]


def test_no_thinking_is_all_answer(folder, capsys):
    argv = ["--model", str(folder), "--prompt", "the cat", "--chat", *FLAGS, "--thinking-budget", "1"]
    code, records, err = generate(capsys, *argv, "--no-thinking")
    assert code == 0, err
    tokens = [r for r in records if r["type"] == "token"]
    assert [r["phase"] for r in tokens] == ["answer"] * 7 and not any(r["forced"] for r in tokens)


def test_a_model_without_markers_writes_a_null_phase(tmp_path, capsys):
    plain = write_tiny_model(tmp_path / "plain")
    code, records, err = generate(capsys, "--model", str(plain), "--prompt", "the cat", "--max-tokens", "3")
    assert code == 0, err
    assert [r["phase"] for r in records if r["type"] == "token"] == [None] * 3
    # The reasoning flags change nothing for it: the run goes on, and stderr says so.
    argv = ["--model", str(plain), "--prompt", "the cat", "--max-tokens", "3", "--chat", "--no-thinking"]
    code, records, err = generate(capsys, *argv, "--thinking-budget", "2")
    assert code == 0 and [r["phase"] for r in records if r["type"] == "token"] == [None] * 3
    assert "no reasoning markers: --think-variant and --thinking-budget change nothing" in err
    assert "no enable_thinking switch: --no-thinking changes nothing" in err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--no-thinking"], "--no-thinking"),
        (["--think-variant", "{nope"], "--think-variant is not valid JSON"),
        (["--think-variant", "[1]"], "--think-variant must be a JSON object"),
        (["--think-variant", '{"temperature": -1}'], "temperature"),
        (["--think-variant", '{"what": 1}'], "what"),
        (["--thinking-budget", "0"], "thinking_budget"),
        (["--think-variant", '{"max_tokens": 3}'], "--think-variant cannot set max_tokens"),
    ],
)
def test_bad_reasoning_flags_are_usage_errors_before_loading(extra, says, capsys):
    code, records, err = generate(capsys, "--model", "/nonexistent", "--prompt", "x", *extra)
    assert code == 2 and records == [] and says in err and err.startswith("error: ")


def test_each_variant_of_a_fork_carries_the_think_variant_and_budget(folder, capsys):
    argv = ["--model", str(folder), "--prompt", "the cat <think>", *FLAGS, "--thinking-budget", "2"]
    argv += ["--think-variant", json.dumps(VARIANT), "--variant", '{"seed": 9}', "--variant", '{"seed": 10}']
    code, records, err = generate(capsys, *argv)
    assert code == 0, err
    for request in (0, 1):
        tokens = [r for r in records if r["type"] == "token" and r["request"] == request]
        assert [r["phase"] for r in tokens] == ["thinking"] * 3 + ["answer"] * 4
        assert [r["forced"] for r in tokens] == [False, False, True, False, False, False, False]
