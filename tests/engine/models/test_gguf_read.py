"""GGUF validation: each way a file can be malformed gives a ModelLoadError naming the file and the
problem, fast and without allocating what the header claims; MLX's reader never sees a GGUF."""

import os
import struct
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from engine.api.errors import ModelLoadError
from engine.models.gguf_read import read_gguf
from engine.models.load import converted_folder, load
from tests.support.gguf_reference import bpe_vocab, random_model, write_model_gguf

STRING, ARRAY, UINT32 = 8, 9, 4


def gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def header(tensors: int = 0, kvs: int = 0, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kvs)


def kv(key: str, value_type: int, payload: bytes) -> bytes:
    return gguf_string(key.encode()) + struct.pack("<I", value_type) + payload


def tensor_info(name: str, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return (
        gguf_string(name.encode())
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def one_tensor_file(dims=(32,), ggml_type=0, offset=0, data_bytes=128, extra_tensor=None) -> bytes:
    """A header, one architecture string, one or two tensors, padding to 32 and the data."""
    infos = tensor_info("a.weight", list(dims), ggml_type, offset)
    count = 1
    if extra_tensor is not None:
        infos += tensor_info(*extra_tensor)
        count = 2
    body = header(count, 1) + kv("general.architecture", STRING, gguf_string(b"llama")) + infos
    body += b"\0" * (-len(body) % 32)
    return body + os.urandom(data_bytes)


def rejected(tmp_path: Path, content: bytes, name: str = "bad.gguf") -> str:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ModelLoadError) as info:
        read_gguf(path)
    assert str(path) in str(info.value)
    return info.value.reason


CASES = {
    "empty": (b"", "does not start with the GGUF magic"),
    "not gguf": (b"PK\x03\x04" + bytes(100), "does not start with the GGUF magic"),
    "short header": (b"GGUF\x03\0\0\0", "shorter than a GGUF header"),
    "version 1": (header(version=1), "GGUF version 1"),
    "big-endian": (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
    "2**60 tensors": (header(tensors=2**60), "claims 1152921504606846976 tensors"),
    "2**64-1 metadata entries": (header(kvs=2**64 - 1), "claims 18446744073709551615 metadata entries"),
    "2**40-byte key": (header(kvs=1) + struct.pack("<Q", 2**40) + bytes(64), "runs past the end of the file"),
    "2**40-byte string": (header(kvs=1) + kv("k", STRING, struct.pack("<Q", 2**40)), "runs past the end"),
    "2**60-item array": (
        header(kvs=1) + kv("k", ARRAY, struct.pack("<IQ", UINT32, 2**60)),
        "claims 1152921504606846976 items",
    ),
    "2**60 strings": (header(kvs=1) + kv("k", ARRAY, struct.pack("<IQ", STRING, 2**60)), "claims"),
    "nested array": (header(kvs=1) + kv("k", ARRAY, struct.pack("<IQ", ARRAY, 1) + bytes(16)), "nested"),
    "unknown value type": (header(kvs=1) + kv("k", 77, bytes(8)), "unknown metadata value type 77"),
    "duplicate key": (
        header(kvs=2) + kv("k", UINT32, bytes(4)) + kv("k", UINT32, bytes(4)),
        "Duplicate k",
    ),
    "key not utf-8": (header(kvs=1) + gguf_string(b"\xff\xfe") + struct.pack("<I", UINT32) + bytes(4), "UTF-8"),
    "no tensors": (header(kvs=1) + kv("general.architecture", STRING, gguf_string(b"llama")), "holds no tensors"),
    "5 dimensions": (one_tensor_file(dims=(32, 1, 1, 1, 1)), "has 5 dimensions"),
    "zero dimension": (one_tensor_file(dims=(32, 0)), "empty dimension"),
    "2**62 elements": (one_tensor_file(dims=(2**31, 2**31)), "too many elements"),
    "unknown type": (one_tensor_file(ggml_type=99), "unknown type 99"),
    "row not whole blocks": (one_tensor_file(dims=(33,), ggml_type=2), "not a multiple of Q4_0's 32"),
    "misaligned offset": (one_tensor_file(offset=4), "not aligned to 32 bytes"),
    "data past the end": (one_tensor_file(dims=(64,), data_bytes=100), "needs bytes"),
    "offset past the end": (one_tensor_file(offset=2**62), "needs bytes"),
    "overlapping tensors": (one_tensor_file(data_bytes=256, extra_tensor=("b.weight", [32], 0, 64)), "overlap"),
    "duplicate tensor": (one_tensor_file(data_bytes=256, extra_tensor=("a.weight", [32], 0, 128)), "duplicated"),
}


HANG_GUARD_S = 30.0
"""Past this a refusal is hung (a loop over a claimed size), not slow."""


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_file_is_rejected_with_the_reason(tmp_path, case):
    content, reason = CASES[case]
    tracemalloc.start()
    start = time.perf_counter()
    got = rejected(tmp_path, content)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert reason in got, got
    # Nothing sized by the header's claims: no allocation (the peak), and no loop over a
    # claimed count (2**62 elements would never end). The time is only a hang guard, far over
    # the milliseconds a refusal takes on a busy machine; it asks no speed.
    assert peak < 16 << 20, peak
    assert elapsed < HANG_GUARD_S, f"hang guard: refusing {case!r} took {elapsed:.1f} s (a refusal takes milliseconds)"


def test_random_bytes_after_the_magic_are_rejected(tmp_path):
    """What made mx.load segfault: b"GGUF" and random bytes."""
    rng = np.random.default_rng(0)
    for i in range(50):
        tail = rng.integers(0, 256, size=int(rng.integers(0, 8192)), dtype=np.uint8).tobytes()
        rejected(tmp_path, b"GGUF" + (struct.pack("<I", 3) if i % 2 else b"") + tail, f"r{i}.gguf")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    vocab = bpe_vocab()
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": len(vocab["tokens"]),
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }
    path = tmp_path_factory.mktemp("read") / "tiny.gguf"
    write_model_gguf(path, "llama", random_model(config), config, vocab)
    return path


def test_valid_file_reads_without_touching_mlx(tiny_gguf, monkeypatch, tmp_path):
    import mlx.core as mx

    seen = []
    real_load = mx.load

    def spy(file, *args, **kwargs):
        seen.append(str(file))
        return real_load(file, *args, **kwargs)

    monkeypatch.setattr(mx, "load", spy)
    monkeypatch.setenv("LOGITSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    gguf = read_gguf(tiny_gguf)
    assert gguf.metadata["general.architecture"] == "llama"
    assert gguf.tensors["blk.0.attn_q.weight"].shape == (64, 64)
    assert len(gguf.metadata["tokenizer.ggml.tokens"]) == len(bpe_vocab()["tokens"])
    load(str(tiny_gguf))
    assert seen and not [f for f in seen if f.endswith(".gguf")]  # only the converted safetensors


def patched(tiny_gguf: Path, tmp_path: Path, edit) -> Path:
    """A copy of the tiny GGUF with one metadata value changed (rewritten through gguf-py)."""
    import gguf

    reader = gguf.GGUFReader(str(tiny_gguf))
    writer = gguf.GGUFWriter(str(tmp_path / "edited.gguf"), "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        key, value, kind, sub = edit(key, value, kind, sub)
        if key is not None:
            writer.add_key_value(key, value, kind, sub_type=sub)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tmp_path / "edited.gguf"


def set_value(name, new_value, new_kind=None):
    def edit(key, value, kind, sub):
        return (key, new_value, new_kind or kind, sub) if key == name else (key, value, kind, sub)

    return edit


def drop(name):
    return lambda key, value, kind, sub: (None, None, None, None) if key == name else (key, value, kind, sub)


METADATA_CASES = {
    "block count": (set_value("llama.block_count", 3), "block_count is 3"),
    "block count as text": (set_value("llama.block_count", "2", 8), "is not a whole number"),
    "heads": (set_value("llama.attention.head_count", 3), "not a multiple of head_count_kv"),
    "feed forward": (set_value("llama.feed_forward_length", 7), "does not match ffn_up"),
    "no epsilon": (drop("llama.attention.layer_norm_rms_epsilon"), "lacks 'llama.attention.layer_norm_rms_epsilon'"),
    "nan epsilon": (set_value("llama.attention.layer_norm_rms_epsilon", float("nan")), "out of range"),
    "tokenizer model": (set_value("tokenizer.ggml.model", "bert"), "unsupported tokenizer model 'bert'"),
    "pre-tokenizer": (set_value("tokenizer.ggml.pre", "mystery"), "unsupported pre-tokenizer 'mystery'"),
    "eos id": (set_value("tokenizer.ggml.eos_token_id", 10**6), "is not a token id"),
    "no merges": (drop("tokenizer.ggml.merges"), "lacks the tokenizer's merges"),
}


@pytest.mark.parametrize("case", list(METADATA_CASES))
def test_bad_metadata_is_a_clear_load_error(tiny_gguf, tmp_path, monkeypatch, case):
    edit, reason = METADATA_CASES[case]
    monkeypatch.setenv("LOGITSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = patched(tiny_gguf, tmp_path, edit)
    with pytest.raises(ModelLoadError) as info:
        load(str(path))
    assert reason in str(info.value) and str(path) in str(info.value)
    assert not list((tmp_path / "cache" / "models").glob("*"))  # nothing half-written left behind


def test_converter_version_is_part_of_the_cache_key(tiny_gguf, tmp_path, monkeypatch):
    import engine.models.load

    monkeypatch.setenv("LOGITSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    first = converted_folder(tiny_gguf)
    assert converted_folder(tiny_gguf) == first
    assert first.name.endswith("-v" + engine.models.load.CONVERTER_VERSION)
    monkeypatch.setattr(engine.models.load, "CONVERTER_VERSION", engine.models.load.CONVERTER_VERSION + "-next")
    second = converted_folder(tiny_gguf)
    assert second != first and first.is_dir() and (second / "config.json").is_file()
    assert first.name.split("-v")[0] == second.name.split("-v")[0]  # same content hash
