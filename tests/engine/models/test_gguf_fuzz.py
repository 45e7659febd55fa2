"""Fuzz the GGUF loader: every malformed file is rejected with a ModelLoadError or loads; none crashes.

Files are made from the default model's GGUF (only its first megabytes: header, metadata, tensor table
and the start of the data) and from tiny GGUFs written with gguf-py, by truncation, random byte flips
in the header, metadata, tensor table and data, huge counts and lengths written over real count and
length fields, random tensor types, and random bytes after the magic. Loads run in subprocesses,
several files each, so a segfault fails the test (naming the file) instead of killing pytest. Each
subprocess writes a file, loads it with ``engine.models.load`` (and runs the model once if it loads),
and deletes it; a file that crashed its process is left on disk for reproduction.

``FUZZ_FILES`` (default 200) and ``FUZZ_SEED`` (default 0) set the campaign, e.g.
``FUZZ_FILES=5000 FUZZ_SEED=7 .venv/bin/python -m pytest -q -s tests/engine/models/test_gguf_fuzz.py``;
``FUZZ_REPORT=path.json`` writes every file's outcome and rejection reason.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.support.paths import ROOT

FUZZ_FILES = int(os.environ.get("FUZZ_FILES", "200"))
FUZZ_SEED = int(os.environ.get("FUZZ_SEED", "0"))
CHUNK = 100  # files per subprocess
MARK = "FUZZ "
DEFAULT_DATA_KEPT = 256 * 1024  # bytes of tensor data kept after the default model's tensor table
HUGE = (2**31, 2**32 - 1, 2**40, 2**60, 2**63, 2**64 - 1)


# --- the files -----------------------------------------------------------------------------------


def layout(path: Path) -> dict:
    """Regions of a valid GGUF and the offsets of its count, length and type fields (via gguf-py)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    base = reader.data.__array_interface__["data"][0]

    def at(part) -> int:
        return part.__array_interface__["data"][0] - base

    fields = [(8, 8), (16, 8)]  # tensor count, metadata count
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        fields.append((field.offset, 8))  # key length
        value_parts = field.parts[3:]
        fields.append((at(field.parts[2]), 4))  # value type
        for part in value_parts[:40]:  # string lengths, array item types and counts, the first items
            if part.dtype in (np.uint64, np.uint32) and part.size == 1:
                fields.append((at(part), part.dtype.itemsize))
    for tensor in reader.tensors:
        name_len, _name, n_dims, dims, raw_type, offset = tensor.field.parts
        fields += [(at(name_len), 8), (at(n_dims), 4), (at(raw_type), 4), (at(offset), 8)]
        fields += [(at(dims) + 8 * i, 8) for i in range(dims.size)]
    table = min(t.field.offset for t in reader.tensors)
    return {
        "path": str(path),
        "size": int(reader.data.shape[0]),
        "table": int(table),
        "data": int(reader.data_offset),
        "types": [(at(t.field.parts[4]), 4) for t in reader.tensors],
        "fields": fields,
    }


def tiny_bases(folder: Path) -> list[Path]:
    """Three small valid GGUFs: float32 llama (BPE), mixed quantized llama, qwen3 with SentencePiece."""
    from gguf import GGMLQuantizationType as T

    from tests.support.gguf_reference import bpe_vocab, random_model, spm_vocab, write_model_gguf

    def config(model_type, vocab, **extra):
        return {
            "model_type": model_type,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5,
            "vocab_size": len(vocab["tokens"]),
            "max_position_embeddings": 256,
            "rope_theta": 10000.0,
            "tie_word_embeddings": True,
            **extra,
        }

    bases = []
    bpe, spm = bpe_vocab(), spm_vocab()
    cfg = config("llama", bpe)
    bases.append(folder / "llama-f32.gguf")
    write_model_gguf(bases[-1], "llama", random_model(cfg), cfg, bpe)
    types = {"blk.0.ffn_down.weight": T.Q4_K, "blk.1.ffn_down.weight": T.Q6_K, "blk.0.attn_q.weight": T.Q4_0}
    types |= {"blk.0.attn_k.weight": T.Q8_0, "blk.1.attn_v.weight": T.Q5_1, "blk.1.ffn_up.weight": T.F16}
    bases.append(folder / "llama-quant.gguf")
    write_model_gguf(bases[-1], "llama", random_model(cfg), cfg, bpe, types=types)
    cfg = config("qwen3", spm, head_dim=16)
    bases.append(folder / "qwen3-spm.gguf")
    write_model_gguf(bases[-1], "qwen3", random_model(cfg), cfg, spm)
    return bases


def mutation(rng: np.random.Generator, base: dict, index: int, default: bool) -> dict:
    """One malformed file: {"name", "base", "keep": bytes of the base to keep, "patches": [(offset, hex)]}."""
    size, table, data = base["size"], base["table"], base["data"]
    end = min(size, data + DEFAULT_DATA_KEPT) if default else size
    kinds = ["truncate", "flip-header", "flip-metadata", "flip-table", "huge", "huge", "after-magic"]
    if not default:
        kinds += ["flip-data", "type", "flip-anywhere"]
    kind = kinds[rng.integers(len(kinds))]
    keep, patches = end, []

    def flips(low: int, high: int, most: int) -> None:
        for _ in range(int(rng.integers(1, most + 1))):
            patches.append((int(rng.integers(low, high)), bytes([int(rng.integers(256))]).hex()))

    if kind == "truncate":
        region = rng.integers(3)
        low, high = [(0, table), (table, data), (data, end)][region]
        keep = int(rng.integers(low, max(high, low + 1)))
    elif kind == "flip-header":
        flips(4 if rng.random() < 0.8 else 0, 24, 4)
    elif kind == "flip-metadata":
        flips(24, table, 16)
    elif kind == "flip-table":
        flips(table, data, 16)
    elif kind == "flip-data":
        flips(data, size, 64)
    elif kind == "flip-anywhere":
        flips(0, size, 8)
    elif kind == "type":
        offset, _ = base["types"][rng.integers(len(base["types"]))]
        patches.append((offset, struct.pack("<I", int(rng.integers(0, 42))).hex()))
    elif kind == "huge":
        offset, width = base["fields"][rng.integers(len(base["fields"]))]
        choices = [v for v in (*HUGE, size, size // 2 + 1) if v < 2 ** (8 * width)]
        value = choices[rng.integers(len(choices))]
        patches.append((offset, value.to_bytes(width, "little").hex()))
    else:  # random bytes after the magic (sometimes after a plausible version too)
        head = b"GGUF" + (struct.pack("<I", 3) if rng.random() < 0.5 else b"")
        tail = rng.integers(0, 256, size=int(rng.integers(0, 4096)), dtype=np.uint8).tobytes()
        return {"name": f"{index:05d}-after-magic.gguf", "base": None, "keep": 0, "patches": [(0, (head + tail).hex())]}
    stem = Path(base["path"]).stem
    return {"name": f"{index:05d}-{stem}-{kind}.gguf", "base": base["path"], "keep": keep, "patches": patches}


def make_specs(count: int, seed: int, bases: list[dict], default: dict) -> list[dict]:
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(count):
        if i % 5 < 2:  # two in five from the default model
            specs.append(mutation(rng, default, i, default=True))
        else:
            specs.append(mutation(rng, bases[i % len(bases)], i, default=False))
    return specs


# --- the subprocess ------------------------------------------------------------------------------


def build(spec: dict, folder: Path) -> Path:
    data = bytearray()
    if spec["base"]:
        with open(spec["base"], "rb") as f:
            data = bytearray(f.read(spec["keep"]))
    for offset, hex_bytes in spec["patches"]:
        chunk = bytes.fromhex(hex_bytes)
        if offset + len(chunk) > len(data):
            data.extend(b"\0" * (offset + len(chunk) - len(data)))
        data[offset : offset + len(chunk)] = chunk
    path = folder / spec["name"]
    path.write_bytes(bytes(data))
    return path


def worker(spec_file: str, folder: str) -> None:
    import mlx.core as mx

    from engine.api.errors import ModelLoadError
    from engine.models.load import load

    for spec in json.loads(Path(spec_file).read_text()):
        path = build(spec, Path(folder))
        print(MARK + json.dumps({"start": spec["name"]}), flush=True)
        if spec["name"] == os.environ.get("FUZZ_SELF_TEST_CRASH"):  # the harness's own test
            os.abort()
        try:
            loaded = load(str(path))
            mx.eval(loaded.model(mx.array([[0, 1, 2]])))
            result, reason = "loaded", ""
        except ModelLoadError as exc:
            result, reason = "rejected", exc.reason
        except BaseException as exc:  # noqa: BLE001 - anything else escaping load() is a finding
            result, reason = "escaped", f"{type(exc).__name__}: {exc}"
        print(MARK + json.dumps({"name": spec["name"], "result": result, "reason": reason[:300]}), flush=True)
        path.unlink()


def run_specs(specs: list[dict], folder: Path, timeout: float = 600) -> tuple[dict, list[str]]:
    """Run ``specs`` in subprocesses; return ({name: (result, reason)}, [crash descriptions])."""
    results: dict[str, tuple[str, str]] = {}
    crashes: list[str] = []
    pending = list(specs)
    env = dict(os.environ, LOGITSCOPE_CACHE_DIR=str(folder / "cache"), PYTHONFAULTHANDLER="1")
    while pending:
        chunk, pending = pending[:CHUNK], pending[CHUNK:]
        spec_file = folder / "specs.json"
        spec_file.write_text(json.dumps(chunk))
        command = [sys.executable, "-m", "tests.engine.models.test_gguf_fuzz", str(spec_file), str(folder)]
        try:
            proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            out, code, note = proc.stdout, proc.returncode, proc.stderr[-2000:]
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            code, note = None, f"timed out after {timeout} s"
        started = None
        for line in out.splitlines():
            if not line.startswith(MARK):
                continue
            record = json.loads(line[len(MARK) :])
            if "start" in record:
                started = record["start"]
            else:
                results[record["name"]] = (record["result"], record["reason"])
                started = None
        if code != 0:
            culprit = started or "(between files)"
            what = "timed out" if code is None else f"exit code {code}"
            crashes.append(f"{folder / culprit}: {what}\n{note}")
            done = {s["name"] for s in chunk if s["name"] in results}
            pending = [s for s in chunk if s["name"] not in done and s["name"] != culprit] + pending
    return results, crashes


def test_fuzzed_gguf_files_never_crash(tmp_path):
    """FUZZ_FILES malformed GGUFs, each opened in a subprocess of its own: refused with a reason, never a crash.

    Slow: a process per file (a crash must not take the test with it), each importing MLX."""
    from engine.models.load import default_model_path

    start = time.perf_counter()
    default = layout(default_model_path())
    bases = [layout(p) for p in tiny_bases(tmp_path)]
    specs = make_specs(FUZZ_FILES, FUZZ_SEED, bases, default)
    results, crashes = run_specs(specs, tmp_path)
    counts = {kind: sum(r == kind for r, _ in results.values()) for kind in ("rejected", "loaded", "escaped")}
    escaped = {name: reason for name, (r, reason) in results.items() if r == "escaped"}
    summary = (
        f"fuzz: {len(specs)} files (seed {FUZZ_SEED}), {counts['rejected']} rejected, {counts['loaded']} loaded, "
        f"{len(crashes)} crashed, {counts['escaped']} other exceptions, {time.perf_counter() - start:.0f} s"
    )
    print(summary)
    if os.environ.get("FUZZ_REPORT"):  # every file's outcome, for looking at what the campaign reached
        Path(os.environ["FUZZ_REPORT"]).write_text(json.dumps(results, indent=1))
    assert not crashes, summary + "\n" + "\n".join(crashes)
    assert not escaped, summary + "\n" + json.dumps(escaped, indent=1)
    assert len(results) == len(specs), summary
    assert counts["rejected"] > len(specs) // 2 and counts["loaded"] > 0, summary


def test_a_crash_fails_and_names_the_file(tmp_path, monkeypatch):
    """The harness itself: a process killed by a signal is reported with its file; the rest still run."""
    specs = [
        {"name": f"{i}-after-magic.gguf", "base": None, "keep": 0, "patches": [(0, b"GGUF".hex())]} for i in range(3)
    ]
    monkeypatch.setenv("FUZZ_SELF_TEST_CRASH", specs[1]["name"])
    results, crashes = run_specs(specs, tmp_path)
    assert len(crashes) == 1 and crashes[0].startswith(str(tmp_path / specs[1]["name"]))
    assert "exit code -6" in crashes[0]  # SIGABRT
    assert (tmp_path / specs[1]["name"]).is_file()  # left for reproduction
    assert {name: r for name, (r, _) in results.items()} == {specs[0]["name"]: "rejected", specs[2]["name"]: "rejected"}


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])
