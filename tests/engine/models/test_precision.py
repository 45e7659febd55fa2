"""The precision policy and the fidelity check on a tiny random-weight model: the dtype
a model computes in, the `auto` choice and its memory fallback, and the check's numbers
against an independent computation (mlx-lm's own model objects, NumPy's KL)."""

from __future__ import annotations

import json
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine.analysis.fidelity import check
from engine.api.errors import EngineError
from engine.api.precision import FIDELITY_TOLERANCE
from engine.api.results import summarize
from engine.models import precision
from engine.models.load import load
from engine.session.session import EngineSession
from tests.support.tiny_model import write_tiny_model

TEXT = "the cat sat on the mat and the dog sat on the log"


@pytest.fixture(scope="module")
def half_folder(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("half") / "tiny-half", dtype="float16")


def float_dtypes(model) -> set[str]:
    return {str(v.dtype) for _, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)}


def test_auto_computes_in_float32_and_a_forced_dtype_is_kept(half_folder):
    auto = load(str(half_folder))
    assert (auto.precision.choice, auto.precision.dtype, auto.precision.stored) == ("auto", "float32", "float16")
    assert float_dtypes(auto.model) == {"mlx.core.float32"}
    forced = load(str(half_folder), precision="bfloat16")
    assert forced.precision.dtype == "bfloat16" and forced.precision.reason == "chosen by the user"
    assert float_dtypes(forced.model) == {"mlx.core.bfloat16"}


def test_auto_keeps_half_precision_where_float32_would_not_fit(half_folder, monkeypatch):
    loaded = load(str(half_folder), precision="float16")
    monkeypatch.setattr(precision, "total_memory", lambda: 1000)
    chosen = precision.choose("auto", loaded.model)
    assert chosen.dtype == "float16" and "not fit" in chosen.reason
    monkeypatch.setattr(precision, "total_memory", lambda: 1 << 40)
    assert precision.choose("auto", loaded.model).dtype == "float32"


def test_a_bad_precision_is_refused_before_loading(tmp_path):
    with pytest.raises(EngineError, match="unknown precision 'half'"):
        load(str(tmp_path / "no-such-model"), precision="half")


def test_session_reports_the_precision(half_folder):
    info = EngineSession().load(str(half_folder), precision="float16")
    assert (info.precision, info.precision_choice) == ("float16", "float16")
    assert info.precision_reason


def reference_rows(folder, ids):
    """KL(float32 ‖ float16), top-5 difference and agreement, from two mlx-lm models."""
    from mlx_lm import load as mlx_load

    def logprobs(dtype):
        model, _ = mlx_load(str(folder))
        model.set_dtype(dtype)
        logits = np.array(model(mx.array(ids)[None])[0].astype(mx.float32), dtype=np.float64)
        top = logits.max(-1, keepdims=True)
        return logits - (top + np.log(np.exp(logits - top).sum(-1, keepdims=True)))

    half, full = logprobs(mx.float16)[:-1], logprobs(mx.float32)[:-1]
    kld = (np.exp(full) * (full - half)).sum(-1)
    top = np.argsort(-full, -1)[:, :5]
    diff = np.abs(np.take_along_axis(half, top, -1) - np.take_along_axis(full, top, -1)).max(-1)
    return kld, diff, half.argmax(-1) == full.argmax(-1)


def test_fidelity_check_matches_an_independent_computation(half_folder):
    loaded = load(str(half_folder), precision="float16")
    ids = loaded.tokenizer.encode(TEXT)
    rows = list(check(loaded, ids, chunk=4))  # several chunks: each pass keeps its own cache
    kld, diff, agree = reference_rows(half_folder, ids)
    assert len(rows) == len(ids) - 1
    assert np.allclose([r.kld for r in rows], kld, atol=2e-4)
    assert np.allclose([r.top5_max_diff for r in rows], diff, atol=2e-3)
    assert [r.top_agrees for r in rows] == list(agree)
    assert max(diff) > 0, "a float16 run of random weights differs from float32 somewhere"
    assert float_dtypes(loaded.model) == {"mlx.core.float16"}, "the check left the model as it was"
    summary = summarize("float16", rows)
    assert summary.top5_max_diff == pytest.approx(max(diff), abs=2e-3)
    assert summary.kld_max == pytest.approx(max(kld), abs=2e-4)


def test_fidelity_of_float32_is_exactly_zero(half_folder):
    loaded = load(str(half_folder))
    rows = list(check(loaded, loaded.tokenizer.encode(TEXT)))
    assert all(r.kld == 0 and r.top5_max_diff == 0 and r.top_agrees for r in rows)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=300)


def test_fidelity_command_prints_tokens_and_a_summary(half_folder):
    out = cli("fidelity", "--model", str(half_folder), "--text", TEXT, "--precision", "float16")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    tokens, summary = records[:-1], records[-1]
    assert {r["type"] for r in tokens} == {"token"} and summary["type"] == "summary"
    assert [r["index"] for r in tokens] == list(range(len(tokens)))
    kld, diff, agree = reference_rows(half_folder, load(str(half_folder)).tokenizer.encode(TEXT))
    assert np.allclose([r["kld"] for r in tokens], kld, atol=2e-4)
    assert np.allclose([r["top5_max_diff"] for r in tokens], diff, atol=2e-3)
    assert summary["precision"] == "float16" and summary["reference"] == "float32"
    assert summary["tokens"] == len(tokens) and summary["tolerance"] == FIDELITY_TOLERANCE
    assert summary["within_tolerance"] == (summary["top5_max_diff"] <= FIDELITY_TOLERANCE)


def test_precision_flag_is_checked_like_any_argument(half_folder):
    out = cli("generate", "--model", str(half_folder), "--prompt", "hi", "--precision", "half")
    assert out.returncode == 2 and "invalid choice" in out.stderr and "Traceback" not in out.stderr
    out = cli("generate", "--model", str(half_folder), "--prompt", "hi", "--max-tokens", "2", "--precision", "float16")
    assert out.returncode == 0, out.stderr
