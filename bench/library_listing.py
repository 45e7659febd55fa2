"""Figure 20: the model library's listing (``engine.library.scan_library``) against how many
models are on disk.

A temporary home holds 300 Hugging Face cache entries laid out as huggingface_hub writes them
(blobs, refs/main, snapshot links), each a 7B-sized llama (a real 291-tensor safetensors header,
the file made 4 GB long as a sparse file: the listing must not care how big the weights are),
a third of them MLX 4-bit; plus GGUF files in LM Studio's folder and Ollama models (manifest and
blob), each a real llama.cpp header with a 49,152-token vocabulary and 291 Q4_K tensors, sparse
to 4 GB. Timed: ``scan_library`` in this process with its GGUF header cache empty (every header
walked) and filled (a later listing), median of several runs each, and ``python -m engine models
--json`` as a fresh process (interpreter start and imports included).

    python -m bench.library_listing [--hf 300] [--gguf 20] [--ollama 20] [--runs 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = 4 << 30  # every weight file's length: sparse, so nothing is written
LAYERS = 32
CONFIG = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "rms_norm_eps": 1e-5,
}
_PER_LAYER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _safetensors_header(quantized: bool) -> bytes:
    """A 7B llama's safetensors header (291 tensors; MLX 4-bit adds scales and biases)."""
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(LAYERS):
        names += [f"model.layers.{i}.{n}.weight" for n in _PER_LAYER]
        names += [f"model.layers.{i}.input_layernorm.weight", f"model.layers.{i}.post_attention_layernorm.weight"]
    header: dict = {"__metadata__": {"format": "mlx" if quantized else "pt"}}
    offset = 0
    for name in names:
        for suffix in ("", ".scales", ".biases") if quantized and "norm" not in name else ("",):
            size = 4096 * 4096 // (8 if quantized and not suffix else 1) if "norm" not in name else 8192
            dtype = "U32" if quantized and not suffix else "BF16"
            header[name.replace(".weight", suffix or ".weight")] = {
                "dtype": dtype,
                "shape": [4096, 4096],
                "data_offsets": [offset, offset + size],
            }
            offset += size
    body = json.dumps(header).encode()
    return len(body).to_bytes(8, "little") + body


def _hf_repo(hub: Path, repo_id: str, files: dict[str, bytes], sparse_to: dict[str, int]) -> None:
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name, data in files.items():
        etag = hashlib.sha256(repo_id.encode() + name.encode()).hexdigest()
        blob = repo / "blobs" / etag
        blob.write_bytes(data)
        if name in sparse_to:
            os.truncate(blob, sparse_to[name])
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / etag)


def _gguf_header(path: Path) -> int:
    """A llama.cpp-style header (49,152 tokens and merges, 291 Q4_K tensors); its length."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_file_type(15)  # MOSTLY_Q4_K_M
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(49152)])
    writer.add_token_types([1] * 49152)
    writer.add_token_merges([f"t ok{i}" for i in range(48900)])
    q4k = gguf.GGMLQuantizationType.Q4_K
    names = ["token_embd.weight", "output_norm.weight", "output.weight"]
    names += [f"blk.{i}.{n}.weight" for i in range(LAYERS) for n in ("attn_q", "attn_k", "attn_v", "attn_output")]
    names += [f"blk.{i}.{n}.weight" for i in range(LAYERS) for n in ("ffn_gate", "ffn_up", "ffn_down")]
    names += [f"blk.{i}.{n}.weight" for i in range(LAYERS) for n in ("attn_norm", "ffn_norm")]
    for name in names:
        row = 4096 // 256 * 144  # bytes per row of 4,096 Q4_K weights
        writer.add_tensor_info(name, [4096, row], np.dtype(np.uint8), 4096 * row, raw_dtype=q4k)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path.stat().st_size


def build_home(root: Path, hf: int, gguf_files: int, ollama: int) -> dict[str, str]:
    hub = root / ".cache" / "huggingface" / "hub"
    plain, quantized = _safetensors_header(False), _safetensors_header(True)
    for i in range(hf):
        mlx = i % 3 == 0
        config = CONFIG | ({"quantization": {"group_size": 64, "bits": 4}} if mlx else {})
        files = {
            "config.json": json.dumps(config).encode(),
            "tokenizer_config.json": b"{}",
            "tokenizer.json": b"{}",
            "model.safetensors": quantized if mlx else plain,
        }
        _hf_repo(hub, f"org{i % 12}/model-{i}{'-4bit' if mlx else ''}", files, {"model.safetensors": WEIGHTS})
    template = root / "template.gguf"
    _gguf_header(template)
    header = template.read_bytes()
    template.unlink()
    for i in range(gguf_files):
        path = root / ".lmstudio" / "models" / f"pub{i % 4}" / f"model-{i}-GGUF" / f"model-{i}-Q4_K_M.gguf"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header + i.to_bytes(8, "little"))
        os.truncate(path, WEIGHTS)
    blobs = root / ".ollama" / "models" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for i in range(ollama):
        digest = hashlib.sha256(b"ollama%d" % i).hexdigest()
        blob = blobs / f"sha256-{digest}"
        blob.write_bytes(header)
        os.truncate(blob, WEIGHTS)
        manifest = root / ".ollama/models/manifests/registry.ollama.ai/library" / f"model{i}" / "latest"
        manifest.parent.mkdir(parents=True)
        layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": WEIGHTS}
        manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    return {"HOME": str(root), "LOGITSCOPE_CACHE_DIR": str(root / "logitscope-cache")}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def library_listing(hf: int = 300, gguf_files: int = 20, ollama: int = 20, runs: int = 5) -> dict:
    from engine.library import scan_library

    with tempfile.TemporaryDirectory(prefix="logitscope-library-") as scratch:
        root = Path(scratch) / "home"
        env = build_home(root, hf, gguf_files, ollama)
        headers = root / "logitscope-cache" / "library-headers.json"
        count = len(scan_library(env=env))  # imports (huggingface_hub, gguf) out of the timings
        cold, warm = [], []
        for _ in range(runs):
            headers.unlink(missing_ok=True)
            cold.append(_timed(lambda: scan_library(env=env)))
            warm.append(_timed(lambda: scan_library(env=env)))
        process_env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XDG_", "OLLAMA_"))} | env
        command = [sys.executable, "-m", "engine", "models", "--json"]
        cli = [_timed(lambda: subprocess.run(command, env=process_env, cwd=ROOT, capture_output=True, check=True))]
        cli += [_timed(lambda: subprocess.run(command, env=process_env, cwd=ROOT, capture_output=True, check=True))]
    return {
        "models": count,
        "hf_entries": hf,
        "gguf_files": gguf_files,
        "ollama_models": ollama,
        "weights_bytes_each": WEIGHTS,
        "scan_s_headers_uncached": round(statistics.median(cold), 4),
        "scan_s_headers_cached": round(statistics.median(warm), 4),
        "cli_process_s": round(statistics.median(cli), 3),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hf", type=int, default=300)
    parser.add_argument("--gguf", type=int, default=20)
    parser.add_argument("--ollama", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(library_listing(args.hf, args.gguf, args.ollama, args.runs), indent=1))


if __name__ == "__main__":
    main()
