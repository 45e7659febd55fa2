"""Every supported GGUF architecture: a tiny random mlx-lm model, written to GGUF the way llama.cpp's
converter writes it, converts back to a model with the same logits."""

import math
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from engine.api.errors import ModelLoadError
from engine.models.gguf_arch import llama3_factors
from engine.models.load import load
from tests.support.gguf_reference import bpe_vocab, random_model, spm_vocab, write_model_gguf

PROMPT = [5, 77, 120, 3, 250, 41, 9, 200, 13, 64, 180, 7, 99, 31]  # longer than gemma3's window below
BPE = bpe_vocab()
SPM = spm_vocab()


def base(model_type: str, vocab: dict, **overrides) -> dict:
    config = {
        "model_type": model_type,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": len(vocab["tokens"]),
        "max_position_embeddings": 512,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }
    config.update(overrides)
    return config


def llama3_rope() -> tuple[dict, dict]:
    """Llama 3.1-style scaling, which llama.cpp's converter stores as a rope_freqs tensor."""
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    # convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors, line for line
    base_, dim = 500000.0, 64
    freqs = 1.0 / (base_ ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < 8192 / 4.0:
            factors.append(1)
        elif wavelen > 8192 / 1.0:
            factors.append(8.0)
        else:
            smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
            factors.append(1 / ((1 - smooth) / 8.0 + smooth))
    return scaling, {"rope_freqs.weight": np.array(factors, np.float32)}


def phi3_longrope() -> tuple[dict, dict]:
    rng = np.random.default_rng(3)
    long, short = (1 + rng.random(4) * 3).tolist(), (1 + rng.random(4) * 0.5).tolist()
    scaling = {"type": "longrope", "long_factor": long, "short_factor": short}
    return scaling, {"rope_factors_long.weight": long, "rope_factors_short.weight": short}


def cases():
    llama3, llama3_tensors = llama3_rope()
    longrope, longrope_tensors = phi3_longrope()
    return {
        "llama": (base("llama", BPE), BPE, {"llama.rope.dimension_count": 16}, {}),
        "llama-mistral": (
            # Mistral-style: head_dim != hidden / heads, untied output, SentencePiece vocabulary
            base("llama", SPM, head_dim=32, tie_word_embeddings=False, rope_theta=1e6),
            SPM,
            {"llama.rope.dimension_count": 32},
            {},
        ),
        "llama-3.1": (
            base("llama", BPE, num_attention_heads=2, num_key_value_heads=1, head_dim=64, rope_theta=500000.0)
            | {"rope_scaling": llama3},
            BPE,
            {"llama.rope.dimension_count": 64},
            llama3_tensors,
        ),
        "qwen2": (base("qwen2", BPE, rope_theta=1e6), BPE, {}, {}),
        "qwen3": (base("qwen3", BPE, head_dim=32, tie_word_embeddings=False, rope_theta=1e6), BPE, {}, {}),
        "gemma2": (
            base("gemma2", BPE, head_dim=32, query_pre_attn_scalar=32.0)
            | {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
            BPE,
            {"gemma2.attn_logit_softcapping": 50.0, "gemma2.final_logit_softcapping": 30.0},
            {},
        ),
        "gemma3": (
            base(
                "gemma3_text",
                BPE,
                num_hidden_layers=7,
                head_dim=32,
                query_pre_attn_scalar=32.0,
                sliding_window=4,
                sliding_window_pattern=6,
                rope_theta=1e6,
                rope_local_base_freq=10000.0,
            )
            | {"rope_scaling": {"rope_type": "linear", "factor": 8.0}},
            BPE,
            {
                "gemma3.attention.sliding_window": 4,
                "gemma3.rope.scaling.type": "linear",
                "gemma3.rope.scaling.factor": 8.0,
            },
            {},
        ),
        "phi3": (
            base(
                "phi3",
                BPE,
                tie_word_embeddings=False,
                partial_rotary_factor=0.5,
                max_position_embeddings=4096,
                original_max_position_embeddings=512,
            )
            | {"rope_scaling": longrope},
            BPE,
            {"phi3.rope.dimension_count": 8, "phi3.rope.scaling.original_context_length": 512},
            longrope_tensors,
        ),
    }


CASES = cases()


@pytest.mark.parametrize("case", list(CASES))
def test_architecture_round_trip(case, tmp_path):
    config, vocab, metadata, extra = CASES[case]
    arch = {"gemma3_text": "gemma3"}.get(config["model_type"], config["model_type"])
    model = random_model(config, seed=len(case), norm_center=0.0 if arch.startswith("gemma") else 1.0)
    if arch == "gemma3" and config["tie_word_embeddings"]:
        model.sanitize({})  # mlx-lm's gemma3_text ties the head when the weights have none
    path = tmp_path / f"{case}.gguf"
    write_model_gguf(path, arch, model, config, vocab, metadata, extra_tensors=extra)

    converted = load(str(path))
    assert converted.config["model_type"] == config["model_type"]
    assert converted.vocab_size == config["vocab_size"]
    if "rope_scaling" in config:
        kind = converted.config["rope_scaling"].get("rope_type") or converted.config["rope_scaling"]["type"]
        assert kind == (config["rope_scaling"].get("rope_type") or config["rope_scaling"]["type"])
    prompt = mx.array(PROMPT)[None]
    expected = np.array(model(prompt))
    got = np.array(converted.model(prompt).astype(mx.float32))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=3e-4, rtol=1e-4, err_msg=case)


def test_llama3_rope_parameters_are_recovered_from_rope_freqs(tmp_path):
    config, vocab, metadata, extra = CASES["llama-3.1"]
    model = random_model(config, seed=1)
    write_model_gguf(tmp_path / "l31.gguf", "llama", model, config, vocab, metadata, extra_tensors=extra)
    scaling = load(str(tmp_path / "l31.gguf")).config["rope_scaling"]
    assert scaling["factor"] == pytest.approx(8.0)
    recovered = llama3_factors(scaling, 64, 500000.0)
    np.testing.assert_allclose(recovered, extra["rope_freqs.weight"], rtol=1e-5)


def small_llama(extra: dict) -> dict:
    from engine.models.gguf_arch import build_config

    shapes = {
        "token_embd.weight": (100, 64),
        "blk.0.attn_q.weight": (64, 64),
        "blk.0.attn_k.weight": (32, 64),
        "blk.0.ffn_up.weight": (128, 64),
    }
    metadata = {
        "llama.embedding_length": 64,
        "llama.block_count": 1,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.feed_forward_length": 128,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        **extra,
    }
    return build_config("llama", metadata, shapes, {}, Path("x.gguf"))


def test_rope_scaling_metadata():
    assert "rope_scaling" not in small_llama({"llama.rope.scaling.type": "none"})
    assert small_llama({"llama.rope.scale_linear": 4.0})["rope_scaling"]["factor"] == 4.0  # older files
    linear = small_llama({"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0})
    assert linear["rope_scaling"] == {"type": "linear", "rope_type": "linear", "factor": 2.0}
    yarn = small_llama(
        {
            "llama.rope.scaling.type": "yarn",
            "llama.rope.scaling.factor": 4.0,
            "llama.rope.scaling.original_context_length": 4096,
            "llama.rope.scaling.yarn_beta_fast": 32.0,
        }
    )["rope_scaling"]
    assert yarn["rope_type"] == "yarn" and yarn["original_max_position_embeddings"] == 4096 and yarn["beta_fast"] == 32
    with pytest.raises(ModelLoadError, match="rope scaling 'mystery' is not supported"):
        small_llama({"llama.rope.scaling.type": "mystery"})
    with pytest.raises(ModelLoadError, match="partial rotary"):
        small_llama({"llama.rope.dimension_count": 8})
