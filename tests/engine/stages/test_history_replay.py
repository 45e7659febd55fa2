"""The stages whose state is the history (the penalties' counts, DRY's repeats) replayed
from ``python -m engine generate``'s records alone: the ``done`` record's
``prompt_token_ids`` and the tokens' ids are the history each step counted, and each
candidate's logprobs after ``penalties`` and after ``dry`` must then be what llama.cpp's
formulas (``tests/support/sampling_reference.py``: ``llama_sampler_penalties_apply``,
``llama_sampler_dry_apply``) give from that history. A step reports only its candidates,
not the whole distribution, so each is checked up to the step's log Z: the differences
between candidates must be the formulas' to the records' rounding (5 decimals)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from tests.support import sampling_reference as ref
from tests.support.paths import ROOT

ROUNDING = 1e-4
"""Nats: the records' 5 decimals on a raw logit, a logprob and the logprob it is compared
with, through a repetition penalty's division."""

WINDOW, DRY_LAST_N = 8, -1
BREAKER = "§"
"""A breaker no token of the tiny model holds: DRY's repeats run unbroken (the reference
and the engine then agree on the breakers without the engine's vocabulary)."""

ARGS = [
    "--prompt", "ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab",
    "--max-tokens", "24", "--seed", "5", "--temperature", "0", "--top-logprobs", "100",
    "--repetition-penalty", "1.3", "--presence-penalty", "0.4", "--frequency-penalty", "0.3",
    "--penalty-window", str(WINDOW),
    "--dry-multiplier", "0.8", "--dry-allowed-length", "1", "--dry-penalty-last-n", str(DRY_LAST_N),
    "--dry-sequence-breaker", BREAKER,
]  # fmt: skip


@pytest.fixture(scope="module")
def records(tiny_folder) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "generate", "--model", str(tiny_folder), *ARGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _steps(records: list[dict]) -> tuple[list[int], list[dict]]:
    (done,) = [r for r in records if r["type"] == "done"]
    return done["prompt_token_ids"], [r for r in records if r["type"] == "token"]


def _spread(values: list[float]) -> float:
    """How far apart values that must be one constant (the step's log Z) are."""
    return max(values) - min(values) if values else 0.0


def test_the_records_carry_the_history_each_step_counted(records, tiny):
    prompt, steps = _steps(records)
    assert prompt == list(tiny.tokenizer.encode(ARGS[1]))
    assert [s["index"] for s in steps] == list(range(24))
    assert all(s["chain"][:3] == ["raw", "penalties", "dry"] for s in steps)


def test_each_steps_penalties_are_llama_cpps_over_the_replayed_window(records):
    prompt, steps = _steps(records)
    history = list(prompt)
    penalized_counts = 0
    for i, step in enumerate(steps):
        counts = Counter(history[-WINDOW:])
        offsets = []
        for c in step["top"]:
            lp = c["logprobs"]["penalties"]
            if lp is None:
                continue
            n = np.zeros(1)
            n[0] = counts.get(c["token_id"], 0)
            penalized = ref.penalties(np.array([c["raw_logit"]]), n, 1.3, 0.4, 0.3)[0]
            offsets.append(penalized - lp)  # log Z after the stage, the same for every candidate
            penalized_counts += n[0] > 0
        assert _spread(offsets) < ROUNDING, f"step {i}"
        history.append(step["token_id"])
    assert penalized_counts > 10  # the window held candidates, so the counts were tested


def test_each_steps_dry_penalties_are_llama_cpps_over_the_replayed_history(records, tiny):
    prompt, steps = _steps(records)
    pieces = [tiny.tokenizer.decode([t]) for t in range(tiny.vocab_size)]
    processed = ref.process_breakers([BREAKER], pieces, lambda text: list(tiny.tokenizer.encode(text)))
    assert processed == {}
    history = list(prompt)
    penalized = 0
    for i, step in enumerate(steps):
        dry = ref.dry_penalties(history, processed, tiny.vocab_size, 0.8, 1.75, 1, DRY_LAST_N)
        seen = [c for c in step["top"] if None not in (c["logprobs"]["penalties"], c["logprobs"]["dry"])]
        # log Z's change, from the candidates DRY left alone (most of them)
        shift = float(np.median([c["logprobs"]["penalties"] - c["logprobs"]["dry"] for c in seen]))
        for c in seen:
            before, after, penalty = c["logprobs"]["penalties"], c["logprobs"]["dry"], float(dry[c["token_id"]])
            # float32 keeps 24 bits of a large penalized logit: the rounding grows with it
            assert abs(before - after - penalty - shift) < ROUNDING + 1e-6 * abs(after), (i, c["token_id"], penalty)
            penalized += penalty > 0
        history.append(step["token_id"])
    assert penalized >= 5  # repeats were penalized, so the replay was tested
