"""The app's precision words and the per-model setting (``app.model.precision``), Qt-free."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from app.model.precision import (
    NOT_RECORDED,
    about_precision,
    choice_for,
    model_label,
    precision_words,
    read_choices,
    verdict,
    with_choice,
    worst_first,
)


def test_choices_are_per_source_and_unreadable_settings_read_as_auto():
    choices = with_choice({}, "/models/a", "float16")
    choices = with_choice(choices, "default", "bfloat16")
    assert read_choices(json.dumps(choices)) == {"/models/a": "float16", "default": "bfloat16"}
    assert choice_for(choices, "/models/a") == "float16" and choice_for(choices, "/models/b") == "auto"
    assert "/models/a" not in with_choice(choices, "/models/a", "auto")  # auto is the default: not stored
    for bad in ("not json", "[1]", None, json.dumps({"x": "float8"})):
        assert read_choices(bad) == {}
    with pytest.raises(ValueError, match="precision must be one of"):
        with_choice({}, "x", "float8")


def test_words_for_a_model_and_a_reply():
    local = SimpleNamespace(
        name="SmolLM2", precision="float32", precision_choice="auto", precision_reason="it fits in memory"
    )
    assert model_label(local) == "SmolLM2 · float32"
    assert about_precision(local) == "Computes in float32 (auto): it fits in memory."
    server = SimpleNamespace(name="m", precision="", precision_choice="", precision_reason="")
    assert model_label(server) == "m" and "server" in about_precision(server)
    assert precision_words(None) == precision_words("") == NOT_RECORDED
    assert precision_words("bfloat16") == "bfloat16"


def test_the_verdict_says_what_to_do_when_off():
    within = SimpleNamespace(precision="float16", tolerance=0.03, within_tolerance=True, top5_max_diff=0.01)
    off = SimpleNamespace(precision="float16", tolerance=0.03, within_tolerance=False, top5_max_diff=0.5)
    assert verdict(within).startswith("Within 0.03 nats of float32")
    assert verdict(off).startswith("Not within 0.03") and "0.500" in verdict(off) and "float32" in verdict(off)
    rows = [SimpleNamespace(top5_max_diff=d, kld=k) for d, k in ((0.1, 0.0), (0.3, 0.0), (0.1, 0.2))]
    assert [(r.top5_max_diff, r.kld) for r in worst_first(rows)] == [(0.3, 0.0), (0.1, 0.2), (0.1, 0.0)]
