"""tools/requantize.py: another quantization of a GGUF file, checked with gguf-py's reader
and loaded by the engine."""

from __future__ import annotations

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from engine.models.load import load
from tests.engine.models.test_gguf_arch import CASES
from tests.support.gguf_reference import random_model, write_model_gguf
from tools.requantize import requantize


def test_every_quantized_tensor_is_requantized_and_the_rest_copied(tmp_path):
    config, vocab, metadata, extra = CASES["llama"]
    model = random_model(config, seed=3)
    src, dst = tmp_path / "q4_1.gguf", tmp_path / "q8_0.gguf"
    types = {"token_embd.weight": Q.Q4_1, "blk.0.attn_q.weight": Q.Q4_1, "blk.0.ffn_down.weight": Q.Q4_1}
    written = write_model_gguf(src, "llama", model, config, vocab, metadata, types=types, extra_tensors=extra)
    counts = requantize(src, dst, "Q8_0")
    before, after = gguf.GGUFReader(src), gguf.GGUFReader(dst)
    assert counts == {"requantized": 3, "copied": len(before.tensors) - 3}
    for old, new in zip(before.tensors, after.tensors, strict=True):
        assert old.name == new.name and tuple(old.shape) == tuple(new.shape)
        if old.name in types:
            assert new.tensor_type == Q.Q8_0
            values = gguf.quants.dequantize(new.data, new.tensor_type)
            scale = np.abs(written[old.name]).max()
            np.testing.assert_allclose(values, written[old.name], atol=scale / 100)  # Q8_0 of the Q4_1 values
        else:
            assert new.tensor_type == old.tensor_type and np.array_equal(np.array(new.data), np.array(old.data))
    keys = lambda r: {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}  # noqa: E731
    assert keys(before) == keys(after)
    loaded = load(str(dst))  # the engine converts and loads it like any GGUF
    assert loaded.vocab_size == config["vocab_size"]
