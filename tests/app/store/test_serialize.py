"""TokenStep <-> JSON in the store: the codec's current version keyed by stage name, and version 1
mapped onto a chain."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from app.store.serialize import step_from_dict, step_to_dict, steps_from_json, steps_to_json
from engine.api.codec import CODEC_VERSION
from engine.api.codec_v1 import chain_from_v1
from engine.api.params import LLAMA_CPP_SAMPLERS, SamplingParams
from tests.support.chain_steps import chain_step


def test_multi_stage_step_round_trips():
    params = SamplingParams(
        temperature=0.8,
        top_k=8,
        dry_multiplier=0.8,
        dry_sequence_breakers=("\n", "::"),
        xtc_probability=1.0,
        samplers=LLAMA_CPP_SAMPLERS,
        logit_bias={1: 1.0},
        seed=3,
    )
    step = chain_step(params=params)
    assert len(step.chain) == 7 and any(c.removed_by == "xtc" for c in step.top)
    text = steps_to_json([step])
    assert "Infinity" not in text and "NaN" not in text  # strict JSON
    (back,) = steps_from_json(text)
    assert back == replace(step, request_id=-1)  # request ids belong to one engine run
    assert back.params.samplers == LLAMA_CPP_SAMPLERS
    assert back.params.dry_sequence_breakers == ("\n", "::")


def test_the_store_record_is_keyed_by_stage_name():
    step = chain_step()
    data = json.loads(json.dumps(step_to_dict(step)))
    assert data["v"] == CODEC_VERSION
    assert data["chain"] == list(step.chain)
    assert set(data["entropies"]) == set(step.chain) == set(data["survivors"]) == set(data["logprobs"])
    lyon = next(t for t in data["top"] if t["token_id"] == 1)
    assert lyon["removed_by"] == "xtc"
    assert lyon["logprobs"]["xtc"] is None
    assert lyon["logprobs"]["bias"] == pytest.approx(next(c for c in step.top if c.token_id == 1).logprobs[1])
    # The order of the keys does not matter: ``chain`` gives it.
    data["logprobs"] = dict(reversed(list(data["logprobs"].items())))
    assert step_from_dict(data).logprobs == step.logprobs


def test_a_newer_format_is_refused():
    data = step_to_dict(chain_step())
    data["v"] = CODEC_VERSION + 1
    with pytest.raises(ValueError, match=f"format {CODEC_VERSION + 1}"):
        step_from_dict(data)


@pytest.mark.parametrize(
    ("params", "chain"),
    [
        ({}, ("raw", "temperature")),  # greedy, no truncation: final was penalized at T = 1
        ({"temperature": 1.0}, ("raw", "temperature")),
        ({"temperature": 0.7, "top_k": 40}, ("raw", "top_k")),
        ({"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05}, ("raw", "min_p")),
        ({"temperature": 1.0, "top_p": 0.9}, ("raw", "top_p")),
        ({"repetition_penalty": 1.1, "temperature": 0.7}, ("raw", "penalties", "temperature")),
        ({"frequency_penalty": 0.2, "logit_bias": {"3": 1.0}}, ("raw", "penalties", "temperature")),
        ({"logit_bias": {"3": -100.0}, "top_k": 5}, ("raw", "bias", "top_k")),
    ],
)
def test_format_1_chain_follows_the_old_parameters(params, chain):
    assert chain_from_v1(params) == chain


def test_format_1_step_maps_its_three_distributions():
    old = {
        "index": 4,
        "position": 30,
        "token_id": 7,
        "text": " is",
        "piece": " is",
        "raw_logprob": -1.5,
        "penalized_logprob": -1.2,
        "logprob": -0.4,
        "entropy_raw": 2.5,
        "entropy": 1.1,
        "forced": False,
        "params": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.2, "seed": 3},
        "top": [
            [7, " is", 3.0, -1.5, -1.2, -0.4, 0.0, 0.1, 0],
            [9, " was", 2.0, -2.5, -2.6, None, 0.0, -0.3, 2],
        ],
    }
    step = step_from_dict(old)
    assert step.chain == ("raw", "penalties", "top_p")
    assert step.logprobs == (-1.5, -1.2, -0.4)
    assert step.entropies == (2.5, None, 1.1)  # format 1 had no entropy in the middle: not known
    assert step.survivors == (None, None, None)
    kept, removed = step.top
    assert kept.logprobs == (-1.5, -1.2, -0.4) and kept.removed_by is None
    assert removed.logprobs == (-2.5, -2.6, -math.inf) and removed.removed_by == "top_p"
    assert removed.penalty == -0.3 and removed.count == 2
    # Saved again, it is the current version and reads back the same (None included).
    again = step_from_dict(json.loads(json.dumps(step_to_dict(step))))
    assert again.chain == step.chain and again.top == step.top
    assert again.entropies[1] is None


def test_records_orjson_refuses_read_as_json_reads_them():
    """A record written before non-finite numbers were null holds NaN, which orjson refuses:
    the array is then read by ``json``, and every value means what it meant (a NaN raw logit
    not reported, an integer logprob a float, a count of -1 unknown)."""
    import orjson

    step = chain_step()
    records = json.loads(steps_to_json([step, step]))
    old = records[0]["top"][0]
    old["raw_logit"], old["count"], old["bias"] = float("nan"), -1, 0
    records[0]["top"][1]["logprobs"][step.chain[0]] = -3
    text = json.dumps(records)  # NaN as the standard library writes it
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    back = steps_from_json(text)
    top = back[0].top
    assert (top[0].raw_logit, top[0].count, top[0].bias) == (None, None, 0.0)
    assert type(top[0].bias) is float and top[1].logprobs[0] == -3.0 and type(top[1].logprobs[0]) is float
    assert back[1] == replace(step, request_id=-1)  # the record beside them as written
