"""Model loading: the default GGUF, float GGUFs, folders, and every way loading can fail."""

import json
import os
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine.api.errors import ModelLoadError
from engine.models.gguf_read import read_gguf
from engine.models.load import cache_root, default_model_path, load
from engine.runtime.prompts import encode_chat
from tests.support.gguf_reference import ReferenceBPE, permute_for_gguf
from tests.support.tiny_model import MERGES, build_tokenizer, write_tiny_model

TEXTS = [
    "The capital of France is",
    "Hello, world! It's 2026-11-22 and we've got 1234567 tokens.\n\n  Indented\tcode();",
    "Ünïcödé — emoji 🙂 and 日本語 text, plus   trailing spaces   ",
]


@pytest.fixture(scope="module")
def default_reference():
    meta = read_gguf(default_model_path()).metadata
    return ReferenceBPE(
        meta["tokenizer.ggml.tokens"],
        meta["tokenizer.ggml.merges"],
        meta["tokenizer.ggml.token_type"],
        digits_first=meta["tokenizer.ggml.pre"] == "smollm",
    )


def test_default_tokenizer_matches_gguf_tokenizer(smollm, default_reference):
    for text in TEXTS:
        ids = smollm.tokenizer.encode(text)
        assert ids == default_reference.encode(text)
        assert smollm.tokenizer.decode(ids) == text
    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
    ]
    rendered = smollm.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    assert rendered.count("<|im_start|>") == 5
    ids = encode_chat(smollm.tokenizer, conversation)
    assert ids == default_reference.encode(rendered)
    assert smollm.tokenizer._tokenizer.decode(ids, skip_special_tokens=False) == rendered


def test_default_model_facts(smollm):
    assert smollm.vocab_size == 49152
    assert smollm.context_length == 8192
    assert 2 in smollm.eos_token_ids
    layer = smollm.model.model.layers[0].self_attn.q_proj
    assert layer.bits == 4 and layer.group_size == 32
    assert smollm.model.model.embed_tokens.bits == 8


def test_converted_folder_is_cached(smollm):
    stages = []
    load("default", lambda stage, fraction: stages.append(stage))
    assert "reading GGUF" not in stages  # no second conversion
    folders = [p for p in cache_root().iterdir()]
    assert len([p for p in folders if not p.name.startswith(".")]) >= 1
    assert not [p for p in folders if p.name.startswith(".converting")]


GGUF_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def write_tiny_gguf(folder_model, path: Path, dtype=mx.float32, arch="llama", extra=None) -> Path:
    cfg = folder_model.config
    tensors = {}
    for name, value in tree_flatten(folder_model.model.parameters()):
        w = np.array(value.astype(mx.float32))
        if name == "model.embed_tokens.weight":
            key = "token_embd.weight"
        elif name == "model.norm.weight":
            key = "output_norm.weight"
        else:
            _, _, layer, *rest = name.split(".")
            module = ".".join(rest[:-1])
            if module == "self_attn.q_proj":
                w = permute_for_gguf(w, cfg["num_attention_heads"])
            if module == "self_attn.k_proj":
                w = permute_for_gguf(w, cfg["num_key_value_heads"])
            key = f"blk.{layer}.{GGUF_NAMES[module]}.weight"
        tensors[key] = mx.array(w).astype(dtype if w.ndim == 2 else mx.float32)
    tensors.update(extra or {})
    tok = build_tokenizer()
    vocab = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    types = [3 if t.startswith("<|") else 1 for t in tokens]
    u32 = lambda v: mx.array(v, dtype=mx.uint32)  # noqa: E731
    meta = {
        "general.architecture": arch,
        f"{arch}.block_count": u32(cfg["num_hidden_layers"]),
        f"{arch}.context_length": u32(cfg["max_position_embeddings"]),
        f"{arch}.embedding_length": u32(cfg["hidden_size"]),
        f"{arch}.feed_forward_length": u32(cfg["intermediate_size"]),
        f"{arch}.attention.head_count": u32(cfg["num_attention_heads"]),
        f"{arch}.attention.head_count_kv": u32(cfg["num_key_value_heads"]),
        f"{arch}.attention.layer_norm_rms_epsilon": mx.array(cfg["rms_norm_eps"]),
        f"{arch}.rope.freq_base": mx.array(cfg["rope_theta"]),
        f"{arch}.vocab_size": u32(cfg["vocab_size"]),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": mx.array(types, dtype=mx.int32),
        "tokenizer.ggml.merges": [f"{a} {b}" for a, b in MERGES],
        "tokenizer.ggml.eos_token_id": u32(tokens.index("<|im_end|>")),
        "tokenizer.ggml.bos_token_id": u32(tokens.index("<|endoftext|>")),
        "tokenizer.chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    }
    mx.save_gguf(str(path), tensors, meta)
    return path


@pytest.mark.parametrize(("dtype", "tolerance"), [(mx.float32, 1e-4), (mx.float16, 0.05)])
def test_float_gguf_converts_to_the_same_model(tiny, tmp_path, dtype, tolerance):
    gguf = write_tiny_gguf(tiny, tmp_path / "tiny.gguf", dtype)
    converted = load(str(gguf))
    assert converted.config["rope_traditional"] is True
    prompt = mx.array(tiny.tokenizer.encode("the heat in the thin tin"))[None]
    expected = np.array(tiny.model(prompt))
    got = np.array(converted.model(prompt).astype(mx.float32))
    np.testing.assert_allclose(got, expected, atol=tolerance * 10, rtol=tolerance)
    assert converted.tokenizer.encode("the heat in") == tiny.tokenizer.encode("the heat in")


def no_leftovers() -> list[str]:
    root = cache_root()
    return [p.name for p in root.iterdir() if p.name.startswith(".converting")] if root.exists() else []


def test_load_errors_are_clear_and_leave_nothing(tiny, tmp_path):
    default = default_model_path()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(default.read_bytes()[:3_000_000])
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(os.urandom(4096))
    other_arch = write_tiny_gguf(tiny, tmp_path / "arch.gguf", arch="gpt2")
    bad_tensor = write_tiny_gguf(
        tiny, tmp_path / "tensor.gguf", extra={"blk.0.attn_q.weight": mx.zeros((64, 64), mx.int32)}
    )
    unknown = write_tiny_gguf(tiny, tmp_path / "unknown.gguf", extra={"blk.0.mystery.weight": mx.zeros((4,))})
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    cases = {
        str(tmp_path / "missing.gguf"): "no such file",
        str(truncated): "not a readable GGUF",
        str(garbage): "not a readable GGUF",
        str(other_arch): "unsupported architecture 'gpt2'",
        str(bad_tensor): "unsupported type",
        str(unknown): "unsupported tensor 'blk.0.mystery.weight'",
        str(empty_dir): "no config.json",
        "./not/here": "no such file or folder",
    }
    before = set(cache_root().iterdir()) if cache_root().exists() else set()
    for source, reason in cases.items():
        with pytest.raises(ModelLoadError) as info:
            load(source)
        assert reason in str(info.value), (source, str(info.value))
        assert source in str(info.value)
    after = set(cache_root().iterdir()) if cache_root().exists() else set()
    assert after == before
    assert no_leftovers() == []


def test_folder_and_repo_id_resolution(tiny_folder, tmp_path, monkeypatch):
    from engine.models.load import resolve

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # not cached: handed on as the repo id

    assert resolve(str(tiny_folder))[1] == str(tiny_folder)
    assert resolve("HuggingFaceTB/SmolLM2-135M-Instruct") == (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    )
    loaded = load(str(tiny_folder))
    assert loaded.vocab_size == json.loads((tiny_folder / "config.json").read_text())["vocab_size"]


def test_repo_id_failure_is_a_load_error(monkeypatch):
    # Offline mode: huggingface_hub answers from its cache only, never the network.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as info:
        load("logitscope-tests/no-such-model")
    assert "logitscope-tests/no-such-model" in str(info.value)


def test_tiny_folder_written_in_bf16_loads(tmp_path):
    folder = str(write_tiny_model(tmp_path / "bf16", dtype="bfloat16"))
    kept = load(folder, precision="bfloat16")
    assert kept.model.model.embed_tokens.weight.dtype == mx.bfloat16
    auto = load(folder)  # computed in float32, stored in bfloat16
    assert auto.model.model.embed_tokens.weight.dtype == mx.float32
    assert (auto.precision.dtype, auto.precision.stored) == ("float32", "bfloat16")
