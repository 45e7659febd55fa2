"""The logit lens's read-out (engine/analysis/lens.py): the summaries against a float64 stable sort
(ties included), the host product of the head against the model's own in MLX (dense,
quantized, cached or not, softcapped, half precision)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from engine.analysis import lens as lens_module
from engine.analysis.lens import lens, read_out
from engine.models.load import load
from tests.support.tiny_archs import CONFIGS, write_tiny_arch

TEXT = "the cat sat on the mat and the dog ran"


def reference_layer(lp: np.ndarray, final: np.ndarray, chosen: int, top: int) -> dict:
    """One layer's summary as a float64 stable argsort gives it (the definition of the
    order: logprob descending, a tie going to the lower token id)."""
    order = np.argsort(-lp, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(1, len(order) + 1)
    return {
        "top": [int(i) for i in order[:top]],
        "values": lp[order[:top]],
        "entropy": float(-(np.exp(lp) * lp).sum()),
        "kl": float((np.exp(final) * (final - lp)).sum()),
        "rank_final": int(rank[int(np.argmax(final))]),
        "rank_chosen": int(rank[chosen]),
    }


def log_softmax64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


@pytest.mark.parametrize(("vocab", "top"), [(1000, 10), (4096, 5), (77, 100), (130, 1)])
def test_summaries_match_a_stable_sort_ties_included(vocab, top):
    rng = np.random.default_rng(vocab)
    layers, group = 4, 3
    logits = rng.normal(0, 3, (layers, group, vocab)).astype(np.float32)
    # Ties: a run of equal values straddling the top-N boundary, in blocks far apart, and
    # the top value repeated (the final top-1 is then the lower id).
    logits[1, 0, [5, 700 % vocab, vocab - 1, 64 % vocab]] = 30.0
    logits[2, 1, :] = np.round(logits[2, 1, :])  # many exact ties everywhere
    logits[3, 2, [3, 9]] = logits[3, 2].max() + 1
    tokens = [int(t) for t in rng.integers(0, vocab, 8)]
    group_positions = [2, 4, 7]  # 7 is the last token: its chosen token is the final top-1
    rows = list(lens_module._summaries(group_positions, logits.copy(), tokens, top))
    lp = log_softmax64(logits)
    for k, (p, row) in enumerate(zip(group_positions, rows, strict=True)):
        final_top = int(np.argmax(lp[-1, k]))
        chosen = tokens[p + 1] if p + 1 < len(tokens) else final_top
        assert row.chosen == chosen and row.chosen_is_next == (p + 1 < len(tokens))
        for layer in range(layers):
            ref = reference_layer(lp[layer, k], lp[-1, k], chosen, top)
            got = row.layers[layer]
            assert [i for i, _ in got.top] == ref["top"], (layer, k)
            np.testing.assert_allclose([v for _, v in got.top], ref["values"], atol=1e-5)
            assert got.rank_final_top1 == ref["rank_final"] and got.rank_chosen == ref["rank_chosen"]
            assert got.entropy == pytest.approx(ref["entropy"], abs=1e-5)
            assert got.kl_final == pytest.approx(max(0.0, ref["kl"]), abs=1e-5)
            assert got.chosen_logprob == pytest.approx(lp[layer, k, chosen], abs=1e-5)
        assert row.layers[-1].kl_final == 0.0 and row.layers[-1].rank_final_top1 == 1


def _layers_close(a, b, tol=1e-4):
    assert (a.position, a.chosen, a.decided_at) == (b.position, b.chosen, b.decided_at)
    for x, y in zip(a.layers, b.layers, strict=True):
        assert [i for i, _ in x.top] == [i for i, _ in y.top]
        np.testing.assert_allclose([v for _, v in x.top], [v for _, v in y.top], atol=tol)
        assert x.entropy == pytest.approx(y.entropy, abs=tol) and x.kl_final == pytest.approx(y.kl_final, abs=tol)
        assert (x.rank_final_top1, x.rank_chosen) == (y.rank_final_top1, y.rank_chosen)
        assert x.chosen_logprob == pytest.approx(y.chosen_logprob, abs=tol)


def both_heads(loaded, ids, positions, monkeypatch):
    monkeypatch.setattr(lens_module, "HOST_HEAD", True)
    host = list(lens(loaded, ids, positions, top=8))
    monkeypatch.setattr(lens_module, "HOST_HEAD", False)
    device = list(lens(loaded, ids, positions, top=8))
    monkeypatch.setattr(lens_module, "HOST_HEAD", None)
    return host, device


def raw_logprobs(loaded, ids):
    logits = np.array(loaded.model(mx.array(ids)[None])[0].astype(mx.float32), np.float64)
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def test_the_host_product_is_the_models_own_head(tiny, monkeypatch):
    ids = tiny.tokenizer.encode(TEXT)
    positions = [0, 3, len(ids) - 1]
    host, device = both_heads(tiny, ids, positions, monkeypatch)
    for a, b in zip(host, device, strict=True):
        _layers_close(a, b)
    raw = raw_logprobs(tiny, ids)
    for row in host:
        np.testing.assert_allclose([v for _, v in row.layers[-1].top], np.sort(raw[row.position])[::-1][:8], atol=1e-4)
    # Not kept (too big for HOST_HEAD_BYTES): dequantized a chunk at a time, the same numbers.
    monkeypatch.setattr(lens_module, "HOST_HEAD_BYTES", 0)
    monkeypatch.setattr(lens_module, "_CHUNK", 100)
    monkeypatch.setattr(lens_module, "HOST_HEAD", True)
    for a, b in zip(lens(tiny, ids, positions, top=8), device, strict=True):
        _layers_close(a, b)


@pytest.mark.parametrize("tied", [True, False])
def test_a_quantized_head_tied_or_untied(tmp_path, monkeypatch, tied):
    folder = write_tiny_arch(tmp_path / "llama", "llama", overrides={"tie_word_embeddings": tied})
    loaded = load(str(folder))
    nn.quantize(loaded.model, group_size=32, bits=4)
    head = loaded.model.model.embed_tokens if tied else loaded.model.lm_head
    assert isinstance(head, nn.QuantizedEmbedding if tied else nn.QuantizedLinear)
    assert ("lm_head" in loaded.model) is not tied
    ids = loaded.tokenizer.encode(TEXT)
    host, device = both_heads(loaded, ids, [1, len(ids) - 1], monkeypatch)
    for a, b in zip(host, device, strict=True):
        _layers_close(a, b)
    assert id(head) in lens_module._host_heads  # kept for the model's life (weakly)


def test_a_softcapped_head_runs_the_models_own_softcapping(tmp_path, monkeypatch):
    monkeypatch.setitem(
        CONFIGS,
        "gemma2",
        {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "head_dim": 16,
            "rms_norm_eps": 1e-6,
            "query_pre_attn_scalar": 16,
            "final_logit_softcapping": 2.0,
        },
    )
    loaded = load(str(write_tiny_arch(tmp_path / "gemma2", "gemma2")))
    ids = loaded.tokenizer.encode(TEXT)
    host, device = both_heads(loaded, ids, [2, len(ids) - 1], monkeypatch)
    for a, b in zip(host, device, strict=True):
        _layers_close(a, b)
    raw = raw_logprobs(loaded, ids)
    top = host[-1].layers[-1].top
    np.testing.assert_allclose([v for _, v in top], np.sort(raw[-1])[::-1][:8], atol=1e-4)
    layer0 = np.array(read_out(loaded, mx.zeros((1, 64)) + 1.0))
    assert np.abs(layer0).max() <= 2.0 + 1e-5  # every read-out is capped, not only the last


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_half_precision_is_rounded_as_the_model_rounds(tiny_folder, monkeypatch, precision):
    loaded = load(str(tiny_folder), precision=precision)
    ids = loaded.tokenizer.encode(TEXT)
    states, _ = lens_module.hidden_states(loaded, ids)
    h = mx.concatenate(states)
    monkeypatch.setattr(lens_module, "HOST_HEAD", True)
    host = np.array(read_out(loaded, h))
    monkeypatch.setattr(lens_module, "HOST_HEAD", False)
    device = np.array(read_out(loaded, h))
    # On the model's own grid: equal, or one step of it apart (summation order).
    step = np.abs(device) * (2.0**-10 if precision == "float16" else 2.0**-7)
    assert np.all(np.abs(host - device) <= step + 1e-6)
    assert np.mean(host == device) > 0.9
    host_rows = list(lens(loaded, ids, [len(ids) - 1], top=5))
    raw = raw_logprobs(loaded, ids)
    np.testing.assert_allclose([v for _, v in host_rows[0].layers[-1].top], np.sort(raw[-1])[::-1][:5], atol=0.02)
