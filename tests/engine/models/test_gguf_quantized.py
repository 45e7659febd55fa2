"""GGUF tensor types: each one converts to what llama.cpp's own reference (gguf-py) dequantizes it to.

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K become MLX affine-quantized layers at the same bit width
without requantizing: with float32 scales they dequantize to gguf-py's values exactly, and as stored
(float16 scales) within the rounding of the scales. Q2_K, Q3_K and Q6_K become float16 weights equal to
gguf-py's dequantization rounded to float16. F32, F16 and BF16 stay as they are.
"""

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

from engine.api.params import SamplingParams
from engine.library.convertible import AFFINE_BITS, TO_FLOAT16
from engine.models.gguf_quant import convert, decode_affine, pack
from engine.models.load import load
from engine.runtime.scheduler import Scheduler
from tests.support.gguf_reference import bpe_vocab, random_blocks, random_model, write_model_gguf

ROWS, COLS = 24, 512  # two K-quant super-blocks per row


def gguf_tensor(qtype: T, seed: int = 0) -> np.ndarray:
    """[ROWS, bytes per row] of ``qtype``: gguf-py's quantization of random weights where it has one."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(0.0, 0.2, size=(ROWS, COLS)).astype(np.float32)
    try:
        data = quantize(weights, qtype)
    except NotImplementedError:  # K-quants
        return random_blocks(qtype, ROWS, COLS, rng)
    return data if data.dtype == np.uint8 else data.view(np.uint8).reshape(ROWS, -1)


@pytest.mark.parametrize("qtype", list(AFFINE_BITS), ids=lambda t: t.name)
def test_affine_types_convert_without_requantizing(qtype):
    raw = gguf_tensor(qtype)
    reference = dequantize(raw, qtype)
    assert reference.shape == (ROWS, COLS)
    bits = AFFINE_BITS[qtype]
    assert bits == {"Q4": 4, "Q5": 5, "Q8": 8}[qtype.name[:2]]

    # Exact: the integers are repacked unchanged, scales and biases computed in float32.
    q, scales, biases = decode_affine(raw, qtype)
    assert q.max() < 2**bits and scales.shape == (ROWS, COLS // 32)
    exact = mx.dequantize(mx.array(pack(q, bits)), mx.array(scales), mx.array(biases), group_size=32, bits=bits)
    np.testing.assert_array_equal(np.array(exact), reference)

    # As stored: the scales and biases in the narrowest type that holds them exactly
    # (float16 where the file's scales are float16, float32 for the K-quants' products),
    # so the stored weights are gguf-py's, bit for bit.
    parts, got_bits = convert(qtype, raw, (ROWS, COLS))
    wide = qtype in (T.Q4_K, T.Q5_K)
    assert got_bits == bits and parts["weight"].dtype == np.uint32
    assert parts["scales"].dtype == parts["biases"].dtype == (np.float32 if wide else np.float16)
    assert parts["weight"].shape == (ROWS, COLS * bits // 32)
    np.testing.assert_array_equal(parts["weight"], pack(q, bits))
    stored = mx.dequantize(
        mx.array(parts["weight"]),
        mx.array(parts["scales"]).astype(mx.float32),
        mx.array(parts["biases"]).astype(mx.float32),
        group_size=32,
        bits=bits,
    )
    np.testing.assert_array_equal(np.array(stored), reference)


@pytest.mark.parametrize("qtype", TO_FLOAT16, ids=lambda t: t.name)
def test_k_quants_with_16_weight_groups_become_float16(qtype):
    raw = gguf_tensor(qtype)
    assert raw.shape[1] == COLS // 256 * GGML_QUANT_SIZES[qtype][1]
    parts, bits = convert(qtype, raw, (ROWS, COLS))
    assert bits is None and set(parts) == {"weight"}
    assert parts["weight"].dtype == np.float16
    np.testing.assert_array_equal(parts["weight"], dequantize(raw, qtype).astype(np.float16))


@pytest.mark.parametrize("qtype", [T.F32, T.F16, T.BF16], ids=lambda t: t.name)
def test_float_types_keep_their_type(qtype):
    weights = np.random.default_rng(1).normal(size=(ROWS, COLS)).astype(np.float32)
    data = quantize(weights, qtype)
    parts, bits = convert(qtype, data, (ROWS, COLS))
    assert bits is None
    value = mx.array(parts["weight"])
    if qtype == T.BF16:
        value = value.view(mx.bfloat16)
    assert value.dtype == {T.F32: mx.float32, T.F16: mx.float16, T.BF16: mx.bfloat16}[qtype]
    np.testing.assert_array_equal(np.array(value.astype(mx.float32)), dequantize(data, qtype))


# One model holding every type: each layer kind written in a different one.
MODEL_TYPES = {
    "token_embd.weight": T.Q5_K,
    "output.weight": T.Q6_K,
    "blk.0.attn_q.weight": T.Q4_0,
    "blk.0.attn_k.weight": T.Q4_1,
    "blk.0.attn_v.weight": T.Q5_0,
    "blk.0.attn_output.weight": T.Q5_1,
    "blk.0.ffn_gate.weight": T.Q8_0,
    "blk.0.ffn_up.weight": T.Q4_K,
    "blk.0.ffn_down.weight": T.Q2_K,
    "blk.1.attn_q.weight": T.Q3_K,
    "blk.1.attn_k.weight": T.BF16,
    "blk.1.attn_v.weight": T.F16,
    "blk.1.ffn_up.weight": T.Q8_0,
}


def reference_model(config: dict, written: dict):
    """mlx-lm's llama holding the GGUF's weights as gguf-py dequantizes them (Q/K rows as stored)."""
    import gguf
    from mlx.utils import tree_flatten, tree_unflatten

    table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config["num_hidden_layers"])
    model = random_model(config | {"rope_traditional": True})
    weights = [
        (name, mx.array(written[table.get_name(name, try_suffixes=(".weight", ".bias"))]))
        for name, _ in tree_flatten(model.parameters())
    ]
    model.update(tree_unflatten(weights))
    return model


def test_every_type_in_one_model(tmp_path):
    vocab = bpe_vocab()
    config = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": len(vocab["tokens"]),
        "max_position_embeddings": 512,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    }
    model = random_model(config)
    written = write_model_gguf(tmp_path / "q.gguf", "llama", model, config, vocab, types=MODEL_TYPES)
    stages = []
    converted = load(str(tmp_path / "q.gguf"), lambda stage, fraction: stages.append((stage, fraction)))
    assert [s for s, _ in stages][:2] == ["hashing GGUF", "reading GGUF"]
    assert [f for _, f in stages] == sorted(f for _, f in stages)  # progress only moves forward
    assert converted.precision.dtype == "float32"

    modules = dict(converted.model.named_modules())
    names = {
        "token_embd": "model.embed_tokens",
        "output": "lm_head",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    for key, qtype in MODEL_TYPES.items():
        parts = key.split(".")
        path = f"model.layers.{parts[1]}.{names[parts[2]]}" if parts[0] == "blk" else names[parts[0]]
        layer, expected = modules[path], written[key]
        if qtype in AFFINE_BITS:
            assert (layer.bits, layer.group_size) == (AFFINE_BITS[qtype], 32), path
            scales, biases = layer.scales.astype(mx.float32), layer.biases.astype(mx.float32)
            got = np.array(mx.dequantize(layer.weight, scales, biases, group_size=32, bits=layer.bits))
            np.testing.assert_array_equal(got, expected, err_msg=path)  # exact: scales kept as computed
        else:
            assert not hasattr(layer, "scales"), path
            assert layer.weight.dtype == mx.float32, path  # stored as float16/bfloat16, computed in float32
            want = expected if qtype in (T.BF16, T.F16) else expected.astype(np.float16).astype(np.float32)
            np.testing.assert_array_equal(np.array(layer.weight.astype(mx.float32)), want, err_msg=path)

    # The whole model: logits close to those of the GGUF's own weights in float32.
    prompt = mx.array([[5, 77, 120, 3, 250, 41, 9]])
    np.testing.assert_allclose(
        np.array(converted.model(prompt).astype(mx.float32)),
        np.array(reference_model(config, written)(prompt)),
        atol=0.05,
        rtol=0.02,
    )
    scheduler = Scheduler(converted)
    scheduler.insert(converted.tokenizer.encode("the heat"), SamplingParams(max_tokens=5))
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    assert events[-1].finish_reason == "length"
