"""``bench/gpu_model.py``: a random model of a real one's exact shape, for the GPU run."""

import json
import lzma
import shutil

import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.utils import quantize_model, save_config, save_model

from bench.gpu_model import shaped_like
from engine.models.load import load
from tests.support.tiny_model import write_tiny_model


def _layout(loaded) -> dict:
    return {name: (value.shape, value.dtype) for name, value in tree_flatten(loaded.model.parameters())}


def _mixed_bits(path: str, module: nn.Module):
    """Every quantized layer listed with its own bits, as the engine's GGUF conversion writes
    them; the MLPs' down projections left in float (Gemma's conversion leaves some so)."""
    if not hasattr(module, "to_quantized") or "down_proj" in path:
        return False
    return {"group_size": 32, "bits": 8 if "embed" in path else 4 if "q_proj" in path else 5}


def test_a_shaped_model_has_the_real_ones_layers_bits_and_tokenizer(tmp_path):
    real = tmp_path / "real"
    write_tiny_model(tmp_path / "float")
    model = load(str(tmp_path / "float")).model
    config = json.loads((tmp_path / "float" / "config.json").read_text())
    model, config = quantize_model(model, config, 32, 4, quant_predicate=_mixed_bits)
    save_model(real, model)
    save_config(config, real / "config.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "float" / name, real / name)
    # What bench/gpu_prepare.sh carries: the config and the tokenizer, packed.
    carried = tmp_path / "carried"
    carried.mkdir()
    shutil.copy(real / "config.json", carried / "config.json")
    shutil.copy(real / "tokenizer_config.json", carried / "tokenizer_config.json")
    (carried / "tokenizer.json.xz").write_bytes(lzma.compress((real / "tokenizer.json").read_bytes()))

    shaped = load(str(shaped_like(carried, tmp_path / "shaped")))
    expected = load(str(real))
    assert _layout(shaped) == _layout(expected)
    quantized = {name.rsplit(".", 1)[0] for name in _layout(expected) if name.endswith(".scales")}
    assert "model.embed_tokens" in quantized and not any("down_proj" in name for name in quantized)
    assert "lm_head.weight" not in _layout(shaped)  # tied, as the real model reads its logits
    text = "the quick brown fox"
    assert shaped.tokenizer.encode(text) == expected.tokenizer.encode(text)


def test_a_tied_gemma_reads_its_logits_through_the_embedding(tmp_path):
    """Gemma 3's class makes an output layer and drops it only when the file has none: the
    shaped model's file has none, as the real one's."""
    import mlx.core as mx
    from mlx_lm.models import gemma3_text

    write_tiny_model(tmp_path / "llama")
    vocab = json.loads((tmp_path / "llama" / "config.json").read_text())["vocab_size"]
    config = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "max_position_embeddings": 512,
        "query_pre_attn_scalar": 32,
        "sliding_window": 32,
        "sliding_window_pattern": 2,
        "tie_word_embeddings": True,
    }
    real = tmp_path / "real"
    real.mkdir()
    model = gemma3_text.Model(gemma3_text.ModelArgs.from_dict(config))
    weights = {k: v for k, v in tree_flatten(model.parameters()) if not k.startswith("lm_head.")}
    mx.save_safetensors(str(real / "model.safetensors"), weights)
    (real / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "llama" / name, real / name)
    carried = tmp_path / "carried"
    carried.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(real / name, carried / name)

    shaped = load(str(shaped_like(carried, tmp_path / "shaped")))
    expected = load(str(real))
    assert expected.model.tie_word_embeddings and shaped.model.tie_word_embeddings
    assert _layout(shaped) == _layout(expected)
