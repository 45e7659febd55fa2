"""Draft models of the tiny model's vocabulary, shared by the speculative tests."""

from __future__ import annotations

import pytest

from engine.models.load import load
from tests.support.tiny_model import write_tiny_model


@pytest.fixture(scope="module")
def near(tmp_path_factory):
    """The tiny model's own weights rounded to bfloat16: close to it, not equal (some rejections)."""
    return load(str(write_tiny_model(tmp_path_factory.mktemp("near") / "m", seed=0, dtype="bfloat16")))


@pytest.fixture(scope="module")
def far(tmp_path_factory):
    """Other random weights, the same vocabulary: most proposals rejected."""
    return load(str(write_tiny_model(tmp_path_factory.mktemp("far") / "m", seed=1)))
