"""``engine kld``: per-token KL divergence and llama-perplexity's summary, checked against
SciPy/NumPy computed here from the models' own logits (mlx-lm's forward pass in one piece),
the base-file path, and the refusals."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from scipy.special import log_softmax, rel_entr

from engine.analysis.kld import BaseFile, compare
from engine.api.errors import EngineError
from engine.api.kld_stats import summarize
from tests.support.tiny_model import write_tiny_model

TEXT = "the cat sat on the mat and the dog ran after the ball in the park " * 3


def test_per_token_kld_and_top_match_scipy():
    rng = np.random.default_rng(3)
    base = log_softmax(rng.normal(0, 3, (40, 300)), axis=-1).astype(np.float32)
    model = log_softmax(np.log(np.exp(base)) + rng.normal(0, 0.4, base.shape), axis=-1).astype(np.float32)
    targets = rng.integers(0, 300, 40)
    rows = compare(base, model, targets, 0, top=4)
    for t, row in enumerate(rows):
        want = rel_entr(np.exp(base[t].astype(np.float64)), np.exp(model[t].astype(np.float64))).sum()
        assert row.kld == pytest.approx(want, rel=1e-4, abs=1e-6)
        assert row.same_top == (np.argmax(base[t]) == np.argmax(model[t]))
        assert [i for i, _ in row.top_base] == list(np.argsort(-base[t])[:4])
        assert row.logprob_model == pytest.approx(model[t, targets[t]])


def test_summary_matches_numpy_and_scipy():
    rng = np.random.default_rng(5)
    n = 400
    kld = rng.gamma(0.5, 0.05, n)
    nll_b = rng.gamma(2.0, 1.0, n)
    nll_m = nll_b + rng.normal(0.02, 0.1, n)
    same = rng.random(n) < 0.9
    s = summarize(kld, nll_b, nll_m, same)
    assert s["kld_mean"] == pytest.approx(kld.mean())
    assert s["kld_mean_se"] == pytest.approx(stats.sem(kld))  # llama.cpp's sqrt(var / (n − 1))
    assert s["kld_median"] == pytest.approx(np.median(kld))
    assert s["kld_percentiles"]["p99"] == pytest.approx(np.quantile(kld, 0.99, method="linear"))
    assert s["kld_percentiles"]["p0.1"] == pytest.approx(np.quantile(kld, 0.001, method="linear"))
    dp = np.exp(-nll_m) - np.exp(-nll_b)
    assert s["dp_mean"] == pytest.approx(dp.mean())
    assert s["dp_rms"] == pytest.approx(math.sqrt(np.mean(dp**2)))
    assert s["dp_rms_se"] == pytest.approx(0.5 / math.sqrt(np.mean(dp**2)) * stats.sem(dp**2))
    assert s["same_top"] == pytest.approx(same.mean())
    assert s["same_top_se"] == pytest.approx(math.sqrt(same.mean() * (1 - same.mean()) / (n - 1)))
    assert s["ppl_base"] == pytest.approx(math.exp(nll_b.mean()))
    assert s["ppl_model_se"] == pytest.approx(math.exp(nll_m.mean()) * stats.sem(nll_m))
    assert s["ln_ppl_ratio"] == pytest.approx(nll_m.mean() - nll_b.mean())
    assert s["ppl_ratio"] == pytest.approx(math.exp(nll_m.mean() - nll_b.mean()))
    # the ratio's error: both standard errors and their covariance (the SE of the paired difference)
    assert s["ln_ppl_ratio_se"] == pytest.approx(stats.sem(nll_m - nll_b), rel=1e-6)
    assert s["nll_correlation"] == pytest.approx(stats.pearsonr(nll_m, nll_b).statistic)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("kld")
    return write_tiny_model(root / "a", seed=0), write_tiny_model(root / "b", seed=1)


def _kld(*args: str) -> subprocess.CompletedProcess:
    """The command in this process (the CLI's main, as ``python -m engine kld``)."""
    from engine.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["kld", *args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _reference(folder: Path, ids: list[int], dtype: str = "float32") -> np.ndarray:
    """The model's raw logprobs at every position, one mlx-lm forward pass, no cache."""
    import mlx.core as mx
    from mlx_lm import load

    model, _ = load(str(folder))
    model.set_dtype(getattr(mx, dtype))
    logits = model(mx.array(ids)[None])[0].astype(mx.float32)
    return log_softmax(np.array(logits, np.float64), axis=-1)


def test_two_models_token_by_token_against_mlx_lm_and_scipy(pair, tmp_path):
    a, b = pair
    proc = _kld("--base", str(a), "--model", str(b), "--text", TEXT, "--top", "3", "--prefill-chunk", "16")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    tokens, (summary,) = [r for r in records if r["type"] == "token"], [r for r in records if r["type"] == "summary"]
    from mlx_lm import load

    _, tokenizer = load(str(a))
    ids = tokenizer.encode(TEXT)
    assert [r["token_id"] for r in tokens] == ids[1:] and [r["index"] for r in tokens] == list(range(len(ids) - 1))
    base, model = _reference(a, ids), _reference(b, ids)
    kl = rel_entr(np.exp(base[:-1]), np.exp(model[:-1])).sum(-1)
    np.testing.assert_allclose([r["kld"] for r in tokens], kl, rtol=2e-3, atol=2e-5)
    assert [r["same_top"] for r in tokens] == list(np.argmax(base[:-1], -1) == np.argmax(model[:-1], -1))
    np.testing.assert_allclose([r["logprob_model"] for r in tokens], model[np.arange(len(ids) - 1), ids[1:]], atol=2e-4)
    assert tokens[5]["top_base"][0]["token_id"] == int(np.argmax(base[5]))
    assert summary["tokens"] == len(tokens) and summary["kld_mean"] == pytest.approx(kl.mean(), rel=2e-3)
    assert summary["kld_max"] > 0.01 and summary["interrupted"] is False
    # The same through a saved base: identical records, the base never loaded with the model.
    saved = tmp_path / "a.kld"
    first = _kld("--base", str(a), "--save-base", str(saved), "--text", TEXT, "--prefill-chunk", "16")
    assert first.returncode == 0, first.stderr
    again = _kld("--base-file", str(saved), "--model", str(b), "--top", "3", "--prefill-chunk", "16")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[:-1] == proc.stdout.splitlines()[:-1]


def test_same_model_in_another_precision(pair):
    a, _ = pair
    proc = _kld("--base", str(a), "--precision", "float16", "--text", TEXT[:60])
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    summary = records[-1]
    assert (summary["base_precision"], summary["precision"]) == ("float32", "float16")
    from mlx_lm import load

    _, tokenizer = load(str(a))
    ids = tokenizer.encode(TEXT[:60])
    kl = rel_entr(np.exp(_reference(a, ids)[:-1]), np.exp(_reference(a, ids, "float16")[:-1])).sum(-1)
    np.testing.assert_allclose([r["kld"] for r in records[:-1]], kl, rtol=0.05, atol=1e-5)
    assert summary["kld_mean"] < 0.01  # a tiny random model loses little in float16, but it does lose
    assert any(r["logprob_base"] != r["logprob_model"] for r in records[:-1])


def test_refusals_are_clear_and_change_nothing(pair, tmp_path):
    a, b = pair
    other = tmp_path / "other-tokenizer"
    shutil.copytree(b, other)
    spec = json.loads((other / "tokenizer.json").read_text())
    spec["model"]["merges"] = []  # the same ids, another tokenization
    (other / "tokenizer.json").write_text(json.dumps(spec))
    proc = _kld("--base", str(a), "--model", str(other), "--text", TEXT)
    assert proc.returncode == 1 and "tokenize the text differently" in proc.stderr, proc.stderr
    proc = _kld("--base", str(a), "--model", "default", "--text", "hello there")
    assert proc.returncode == 1 and "different vocabularies" in proc.stderr, proc.stderr
    for content in (b"", b"not a base file", b"LSCOPE-KLD-BASE\n" + b"\xff" * 8, b"LSCOPE-KLD-BASE\n" + bytes(8)):
        bad = tmp_path / "bad.kld"
        bad.write_bytes(content)
        proc = _kld("--base-file", str(bad), "--model", str(b))
        assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    saved = tmp_path / "ok.kld"
    assert _kld("--base", str(a), "--save-base", str(saved), "--text", TEXT[:40]).returncode == 0
    data = saved.read_bytes()
    saved.write_bytes(data[:-10])  # truncated
    proc = _kld("--base-file", str(saved), "--model", str(b))
    assert proc.returncode == 1 and "truncated" in proc.stderr
    with pytest.raises(EngineError, match="truncated"):
        BaseFile.open(saved)
    proc = _kld("--base", str(a), "--model", str(b))
    assert proc.returncode == 2 and "--text" in proc.stderr


def test_a_pair_that_would_not_fit_goes_through_a_file(pair, monkeypatch):
    from engine.models import fit as model_fit

    a, b = pair
    size = sum(p.stat().st_size for p in b.glob("*.safetensors"))
    assert model_fit.estimate_bytes(str(b), "auto") == size  # float32 weights: their size on disk
    together = _kld("--base", str(a), "--model", str(b), "--text", TEXT[:50])
    monkeypatch.setattr(model_fit, "total_memory", lambda: size)  # room for one of them only
    with pytest.raises(EngineError, match="needs about"):
        model_fit.check_fits_beside(size, str(b), "auto")
    apart = _kld("--base", str(a), "--model", str(b), "--text", TEXT[:50])
    assert apart.returncode == 0 and "go through a file" in apart.stderr, apart.stderr
    assert apart.stdout == together.stdout


def test_the_session_compares_a_reply_and_a_text_with_a_second_model(pair, monkeypatch):
    from engine.models import fit as model_fit
    from engine.session.session import EngineSession

    a, b = pair
    session = EngineSession()
    session.load(str(a))
    assert session.capabilities.compare_models
    with pytest.raises(EngineError, match="load the model to compare with first"):
        list(session.compare_text(TEXT))
    second = session.load_second(str(b))
    assert second.source == str(b) and second.precision == "float32"
    rows = list(session.compare_text(TEXT, top=3))
    direct = _kld("--base", str(a), "--model", str(b), "--text", TEXT, "--top", "3")
    records = [json.loads(line) for line in direct.stdout.splitlines()][:-1]
    assert [r.token_id for r in rows] == [r["token_id"] for r in records]
    np.testing.assert_allclose([r.kld for r in rows], [r["kld"] for r in records], atol=1e-5)
    messages = [{"role": "user", "content": "hi"}]
    reply = [r["token_id"] for r in records[:6]]
    replied = list(session.compare_reply(messages, reply))
    assert [r.index for r in replied] == list(range(6)) and [r.token_id for r in replied] == reply
    # Refusals leave the running model (and nothing else) loaded.
    running = session.scheduler.loaded
    with pytest.raises(EngineError, match="different|vocabulary"):
        session.load_second("default")
    assert session.second_model() is None and session.scheduler.loaded is running
    monkeypatch.setattr(model_fit, "total_memory", lambda: 1000)
    with pytest.raises(EngineError, match="needs about"):
        session.load_second(str(b))
    assert session.scheduler.loaded is running


def test_the_session_compares_with_its_own_weights_and_a_quantized_kv_cache(tmp_path):
    from engine.api.kv_quantization import KVQuantization
    from engine.session.session import EngineSession
    from tests.engine.caches.test_kv_quantization import WIDE
    from tests.support.tiny_archs import write_tiny_arch

    folder = write_tiny_arch(tmp_path / "wide", "llama", overrides=WIDE)  # heads wide enough for groups of 64
    session = EngineSession()
    session.load(str(folder))
    running = session.scheduler.loaded
    second = session.load_second(str(folder), kv=KVQuantization(bits=4))
    assert second.kv == "4-bit (group 64)" and session.comparison.second.model is running.model  # weights shared
    four = [r.kld for r in session.compare_text(TEXT)]
    session.load_second(str(folder), kv=KVQuantization(bits=8))
    eight = [r.kld for r in session.compare_text(TEXT)]
    assert 0 < np.mean(eight) < np.mean(four)
    session.load_second(str(folder))
    assert max(r.kld for r in session.compare_text(TEXT)) < 1e-6  # the same model, the same cache
