"""Q4_0 / Q4_1 / Q8_0 GGUF tensors become MLX affine-quantized layers with the right bits,
and dequantize to what llama.cpp's own reference (gguf-py) dequantizes them to."""

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine.models import load
from engine.params import SamplingParams
from engine.scheduler import Scheduler
from tests.test_models import GGUF_NAMES, permute_for_gguf
from tests.tiny_model import MERGES, build_tokenizer

gguf = pytest.importorskip("gguf")
T = gguf.GGMLQuantizationType

TYPES = {  # GGUF tensor kind -> quantization written
    "token_embd": T.Q8_0,
    "attn_q": T.Q4_0,
    "attn_k": T.Q4_1,
    "attn_v": T.Q8_0,
    "attn_output": T.Q4_0,
    "ffn_gate": T.Q4_1,
    "ffn_up": T.Q4_0,
    "ffn_down": T.Q8_0,
}
BITS = {T.Q4_0: 4, T.Q4_1: 4, T.Q8_0: 8}


def write_quantized_gguf(tiny, path):
    cfg = tiny.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", cfg["num_hidden_layers"])
    writer.add_uint32("llama.context_length", cfg["max_position_embeddings"])
    writer.add_uint32("llama.embedding_length", cfg["hidden_size"])
    writer.add_uint32("llama.feed_forward_length", cfg["intermediate_size"])
    writer.add_uint32("llama.attention.head_count", cfg["num_attention_heads"])
    writer.add_uint32("llama.attention.head_count_kv", cfg["num_key_value_heads"])
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    writer.add_float32("llama.rope.freq_base", cfg["rope_theta"])
    writer.add_uint32("llama.vocab_size", cfg["vocab_size"])
    vocab = sorted(build_tokenizer().get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    written = {}
    for name, value in tree_flatten(tiny.model.parameters()):
        w = np.array(value.astype(mx.float32))
        if name == "model.embed_tokens.weight":
            key, kind = "token_embd.weight", "token_embd"
        elif name == "model.norm.weight":
            key, kind = "output_norm.weight", None
        else:
            _, _, layer, *rest = name.split(".")
            module = ".".join(rest[:-1])
            kind = GGUF_NAMES[module]
            if module == "self_attn.q_proj":
                w = permute_for_gguf(w, cfg["num_attention_heads"])
            if module == "self_attn.k_proj":
                w = permute_for_gguf(w, cfg["num_key_value_heads"])
            key = f"blk.{layer}.{kind}.weight"
        if kind in TYPES:
            data = gguf.quants.quantize(w, TYPES[kind])
            writer.add_tensor(key, data, raw_shape=data.shape, raw_dtype=TYPES[kind])
            written[key] = (TYPES[kind], gguf.quants.dequantize(data, TYPES[kind]))
        else:
            writer.add_tensor(key, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


def test_quantized_gguf_layers(tiny, tmp_path):
    written = write_quantized_gguf(tiny, tmp_path / "q.gguf")
    stages = []
    converted = load(str(tmp_path / "q.gguf"), lambda stage, fraction: stages.append((stage, fraction)))
    assert [s for s, _ in stages][:2] == ["hashing GGUF", "reading GGUF"]
    assert [f for _, f in stages] == sorted(f for _, f in stages)  # progress only moves forward
    modules = dict(converted.model.named_modules())
    names = {"token_embd": "model.embed_tokens"}
    names.update({k: v for v, k in GGUF_NAMES.items()})
    for key, (qtype, expected) in written.items():
        parts = key.split(".")
        path = f"model.layers.{parts[1]}.{names[parts[2]]}" if parts[0] == "blk" else names[parts[0]]
        layer = modules[path]
        assert layer.bits == BITS[qtype] and layer.group_size == 32, path
        got = mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=32, bits=layer.bits)
        np.testing.assert_allclose(np.array(got), expected, atol=2e-3, rtol=1e-3, err_msg=path)
    scheduler = Scheduler(converted)
    scheduler.insert(converted.tokenizer.encode("the heat"), SamplingParams(max_tokens=5))
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    assert events[-1].finish_reason == "length"
