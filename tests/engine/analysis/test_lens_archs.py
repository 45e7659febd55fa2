"""The logit lens on every tiny architecture (tests/support/tiny_archs.py: dense, MoE, sliding
windows, recurrent state; tied and untied heads; Gemma's scaled embeddings), and its
refusals, naming the architecture, of models whose blocks cannot be walked."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from engine.analysis import lens as lens_module
from engine.analysis.lens import hidden_states, lens, read_out
from engine.api.errors import EngineError
from engine.models.load import load
from tests.support.tiny_archs import CONFIGS, write_tiny_arch

TEXT = "the cat sat on the mat and the dog ran off"
UNTIED = [("llama", {"tie_word_embeddings": False}), ("qwen3", {"tie_word_embeddings": False})]
CASES = [(name, {}) for name in CONFIGS] + UNTIED


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c[0] + ("-untied" if c[1] else ""))
def arch(request, tmp_path_factory):
    name, overrides = request.param
    folder = write_tiny_arch(tmp_path_factory.mktemp(name) / name, name, overrides=overrides)
    return name, load(str(folder)), bool(overrides)


def head_of(loaded) -> nn.Module:
    """The module the model's own code unembeds with."""
    return loaded.model.get("lm_head", loaded.model.model.embed_tokens)


def test_every_architecture_reads_out_its_own_logits_at_the_last_layer(arch, monkeypatch):
    name, loaded, untied = arch
    ids = loaded.tokenizer.encode(TEXT)
    logits = np.array(loaded.model(mx.array(ids)[None])[0].astype(mx.float32), np.float64)
    raw = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    positions = [0, 4, len(ids) - 1]
    for host in (True, False):  # the head's product on the host (CPU backend) and in MLX
        monkeypatch.setattr(lens_module, "HOST_HEAD", host)
        rows = list(lens(loaded, ids, positions, top=5))
        for row in rows:
            assert len(row.layers) == loaded.config["num_hidden_layers"] + 1
            last = row.layers[-1]
            assert [t for t, _ in last.top] == list(np.argsort(-raw[row.position], kind="stable")[:5])
            np.testing.assert_allclose([v for _, v in last.top], np.sort(raw[row.position])[::-1][:5], atol=1e-4)
            assert last.kl_final == 0.0 and last.rank_final_top1 == 1
    assert "lm_head" in loaded.model if untied else True
    assert "lm_head" not in loaded.model if name in ("llama", "qwen3", "lfm2") and not untied else True
    assert id(head_of(loaded)) in lens_module._host_heads  # the host product stood in for it


def test_gemma_layer_0_is_the_scaled_embedding(tmp_path):
    loaded = load(str(write_tiny_arch(tmp_path / "gemma", "gemma3_text")))
    ids = loaded.tokenizer.encode(TEXT)
    states, _ = hidden_states(loaded, ids)
    embedded = loaded.model.model.embed_tokens(mx.array(ids))
    scale = mx.array(loaded.config["hidden_size"] ** 0.5, mx.bfloat16).astype(embedded.dtype)  # as Gemma3Model
    np.testing.assert_allclose(np.array(states[0]), np.array(embedded * scale), rtol=1e-6)
    assert not np.allclose(np.array(states[0]), np.array(embedded), rtol=1e-2)
    (row,) = lens(loaded, ids, [3], top=5)
    layer0 = np.array(read_out(loaded, (embedded * scale)[3:4]), np.float64)[0]
    layer0 -= np.logaddexp.reduce(layer0)
    np.testing.assert_allclose([v for _, v in row.layers[0].top], np.sort(layer0)[::-1][:5], atol=1e-4)


class _NoBlocks(nn.Module):
    """A model that is one function: no ``model.layers`` to walk."""

    def __call__(self, inputs, cache=None):
        return mx.zeros((*inputs.shape, 8))


class _AfterTheNorm(nn.Module):
    """An inner model that changes the stream after its final norm: the read-out of the
    last block is then not the model's logits."""

    def __init__(self, inner) -> None:
        super().__init__()
        self.inner, self.layers, self.norm, self.embed_tokens = inner, inner.layers, inner.norm, inner.embed_tokens

    def __call__(self, inputs, *args, **kwargs):
        return self.inner(inputs, *args, **kwargs) + 0.5


class _OwnBlocks(nn.Module):
    """An inner model that runs its own copy of the block list: the wrapped blocks never run."""

    def __init__(self, inner) -> None:
        super().__init__()
        self.inner, self.layers, self.norm = inner, list(inner.layers), inner.norm
        self.embed_tokens = inner.embed_tokens

    def __call__(self, inputs, *args, **kwargs):
        return self.inner(inputs, *args, **kwargs)


def test_a_model_whose_blocks_cannot_be_walked_is_refused_by_name(tiny_folder):
    tiny = load(str(tiny_folder))
    ids = tiny.tokenizer.encode(TEXT)
    stand_in = replace(tiny, model=_NoBlocks(), config={"model_type": "mystery"})
    with pytest.raises(EngineError, match="cannot walk the blocks of a mystery model"):
        list(lens(stand_in, ids, [1]))
    inner = tiny.model.model
    tiny.model["model"] = _AfterTheNorm(inner)
    with pytest.raises(EngineError, match="cannot walk a llama model: its last layer does not give its logits"):
        list(lens(tiny, ids, [1]))
    tiny.model["model"] = _OwnBlocks(inner)
    with pytest.raises(EngineError, match="cannot walk the blocks of a llama model \\(not every block ran\\)"):
        list(lens(tiny, ids, [1]))
    tiny.model["model"] = inner
    assert len(list(lens(tiny, ids, [1]))) == 1
