"""Speculative decoding from the app's side (``app/model/draft.py``): each token's outcome, the
Draft tab's rows, the acceptance row's running rate and the choice saved per model, read from
a real drafted reply of the engine (the tiny model drafted by other random weights of its
vocabulary, sampling at 0.9: proposals accepted, rejected and whole blocks with a bonus)."""

from __future__ import annotations

import math

import pytest

from app.model.draft import (
    DraftChoice,
    DraftChoices,
    acceptance,
    draft_header,
    draft_rows,
    outcome_of,
)
from engine.api.draft import Outcome
from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.models.load import load
from engine.runtime.scheduler import Scheduler
from tests.support.tiny_model import write_tiny_model


@pytest.fixture(scope="module")
def steps(tiny, tmp_path_factory) -> list[TokenStep]:
    far = load(str(write_tiny_model(tmp_path_factory.mktemp("far") / "m", seed=1)))
    scheduler = Scheduler(tiny, prefill_chunk=64)
    scheduler.set_draft(far, 2)
    no_eos = {t: -100.0 for t in tiny.eos_token_ids}
    params = SamplingParams(max_tokens=60, top_logprobs=5, logit_bias=no_eos, temperature=0.9, seed=5)
    scheduler.insert(tiny.tokenizer.encode("the cat sat"), params)
    out = []
    while scheduler.has_work():
        out += [e for e in scheduler.step() if isinstance(e, TokenStep)]
    return out


def test_the_acceptance_row_counts_what_the_engine_counted(steps):
    result = acceptance((1, 0), steps)
    outcomes = [outcome_of(s) for s in steps]
    assert [r.outcome for r in result.rows] == outcomes
    assert result.accepted == outcomes.count(Outcome.ACCEPTED)
    assert result.proposed == result.accepted + outcomes.count(Outcome.REJECTED)
    assert result.passes == sum(s.draft is not None and s.draft.position == 0 for s in steps)
    assert math.isnan(result.rows[0].rate)
    assert result.rows[-1].rate == pytest.approx(result.accepted / result.proposed)
    assert f"{result.accepted} of {result.proposed} proposals" in result.summary()


def test_the_draft_tab_pairs_both_models_and_marks_the_proposal_and_the_draw(steps):
    rejected = next(s for s in steps if outcome_of(s) is Outcome.REJECTED)
    rows = draft_rows(rejected)
    proposed = [r for r in rows if r.proposed]
    drawn = [r for r in rows if r.drawn]
    assert len(proposed) == 1 and len(drawn) == 1 and proposed[0] is not drawn[0]
    assert proposed[0].token_id == rejected.draft.token_id and drawn[0].token_id == rejected.token_id
    assert proposed[0].q == pytest.approx(math.exp(rejected.draft.logprob))
    assert proposed[0].p == pytest.approx(math.exp(rejected.draft.target_logprob))
    assert proposed[0].classic_accept_probability == pytest.approx(rejected.draft.classic_accept_probability)
    assert drawn[0].p == pytest.approx(math.exp(rejected.logprob), rel=1e-5)
    keys = [max(r.q or 0, r.p or 0) for r in rows]
    assert keys == sorted(keys, reverse=True)
    header = draft_header(rejected)
    assert (
        header.startswith("Rejected")
        and "Classic speculative sampling would keep the proposal with min(1, p/q)" in header
    )
    assert f"“{rejected.piece}”: not kept" in header
    bonus = next(s for s in steps if outcome_of(s) is Outcome.BONUS)
    assert draft_header(bonus).startswith("Bonus") and not any(r.proposed for r in draft_rows(bonus))


class Settings(dict):
    def value(self, key, default=None):
        return self.get(key, default)

    def setValue(self, key, value):  # noqa: N802 - QSettings' name
        self[key] = value


def test_the_choice_is_saved_per_model_and_a_damaged_one_reads_as_none():
    settings = Settings()
    choices = DraftChoices(settings)
    choices.set("default", DraftChoice("/models/draft.gguf", "float16", 5))
    choices.set("/other", DraftChoice("x", "auto", 2))
    assert choices.get("default") == DraftChoice("/models/draft.gguf", "float16", 5)
    choices.set("default", None)
    assert choices.get("default") is None and choices.get("/other") is not None
    settings["draft_models"] = "{not json"
    assert choices.get("/other") is None
    settings["draft_models"] = '{"m": {"source": "d", "tokens": 99}, "n": {"source": ""}, "o": [1]}'
    assert choices.get("m") == DraftChoice("d", "auto", 3) and choices.get("n") is None and choices.get("o") is None
