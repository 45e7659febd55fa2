"""Steps for the token codec's tests: the hand-built chain step and a remote server's step
(what it did not report is None), each as a CLI record of ``generate``, of ``score`` (with
``rank``), and the ``done`` / ``score_done`` / ``divergence`` records beside them.
``tests/data/cli_records_7900ff8.jsonl`` holds these records as commit 7900ff8's
``engine/cli/main.py`` printed them (the three encoders before the codec)."""

from __future__ import annotations

import math
from dataclasses import replace

from engine.api.codec import CLI
from engine.api.events import Candidate, Divergence, Finished, FinishReason, ScoreDone, TokenStep
from engine.api.params import SamplingParams
from tests.support.chain_steps import chain_step

NAN = math.nan


def remote_step() -> TokenStep:
    """What a remote server reports: one stage (``reported_stage``); raw logits, bias,
    penalty, counts, entropy, survivors and position not reported (None)."""
    params = SamplingParams(temperature=0.7, seed=1)
    top = (
        Candidate(5, " yes", None, (-0.25,), None, None, None, None),
        Candidate(9, " no", None, (-1.5,), None, None, None, None),
    )
    return TokenStep(
        1, 0, None, 5, " yes", " yes", ("final",), (-0.25,), (None,), (None,), top, params, reported_stage="final"
    )


def cli_lines() -> list[tuple[str, object]]:
    """(kind, value) in the order of the golden file."""
    step = chain_step(index=2)
    finished = Finished(3, FinishReason.LENGTH, 7, 4, 5, 120.5, NAN, "text")
    remote_done = Finished(3, FinishReason.ERROR, 7, 2, None, None, 9.5, "te", error="boom")
    return [
        ("token", (step, 1)),
        ("scored", (replace(step, forced=True, rank=3), 0)),
        ("token", (remote_step(), 0)),
        ("done", (finished, 1)),
        ("done", (remote_done, 0)),
        ("score_done", ScoreDone(0, 12, 3.25, 1.7, 55.0)),
        ("divergence", Divergence(4, 2, ((4, 6),), (0.123456789,), (None,))),
    ]


def to_cli(value):
    """``value`` with every float rounded as the CLI's records round them (an export keeps
    them whole)."""
    if isinstance(value, float):
        return CLI.number(value)
    if isinstance(value, dict):
        return {k: to_cli(v) for k, v in value.items()}
    return [to_cli(v) for v in value] if isinstance(value, list) else value
