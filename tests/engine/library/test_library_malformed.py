"""The model library on files no program should have written, or that another one left half
done: each is listed with a reason (or left out where it is not a model), the rest of the
listing stays, and nothing is raised. Small hand-made files only (no weights are read)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from engine.library import added_folders, scan_library
from engine.library.gguf_header import GGUFHeaderError, read_header
from tests.support.library_home import write_hf_repo

DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON that json.loads cannot parse (RecursionError)
LLAMA = json.dumps({"model_type": "llama"})


def model_folder(folder: Path, config: str = LLAMA, weights: tuple[str, ...] = ("model.safetensors",)) -> Path:
    """A folder as a model's looks from outside: config.json and weight files (empty: never read)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config)
    for name in weights:
        (folder / name).write_bytes(b"")
    return folder


def by_name(env: dict, folders: list[Path] = ()) -> dict:
    return {e.name: e for e in scan_library(folders, env=env)}


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def test_a_gguf_string_array_claiming_2_64_bytes_is_refused(tmp_path):
    """A vocabulary whose first string claims 2**64 - 1 bytes: Python's offsets overflow C's,
    which must read as a malformed header, not end the listing."""
    strings = struct.pack("<IIQ", 9, 8, 2) + struct.pack("<Q", 2**64 - 1) + b"x" * 64  # array of 2 strings
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string(b"tokenizer.ggml.tokens") + strings + bytes(100)
    folder = tmp_path / "Models"
    folder.mkdir()
    (folder / "hostile.gguf").write_bytes(data)
    with pytest.raises(GGUFHeaderError, match="truncated"):
        read_header(folder / "hostile.gguf")
    model_folder(folder / "good")
    entries = by_name({"HOME": str(tmp_path)}, [folder])
    assert entries["hostile.gguf"].reason.startswith("not a readable GGUF file") and entries["good"].loadable


def test_json_nested_too_deeply_is_a_reason_not_a_crash(tmp_path):
    """config.json, an Ollama manifest, LM Studio's settings.json and Logitscope's own
    library.json, each nested 100,000 levels: listed with a reason or ignored."""
    lms = tmp_path / ".lmstudio"
    model_folder(lms / "models" / "pub" / "deep-config", DEEP)
    model_folder(lms / "models" / "pub" / "good")
    (lms / "settings.json").write_text(DEEP)  # its downloadsFolder unreadable: the default folder stays
    manifests = tmp_path / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library" / "deep"
    manifests.mkdir(parents=True)
    (manifests / "latest").write_text(DEEP)
    config = tmp_path / "config"
    config.mkdir()
    (config / "library.json").write_text(DEEP)
    env = {"HOME": str(tmp_path), "LOGITSCOPE_CONFIG_DIR": str(config)}
    assert added_folders(env) == []
    entries = by_name(env)
    assert entries["pub/deep-config"].reason == "config.json is not valid JSON (nested too deeply to parse)"
    assert entries["deep:latest"].reason == "the manifest is not readable JSON"
    assert entries["pub/good"].loadable and len(entries) == 3


def test_a_config_json_that_is_not_an_object_says_what_it_holds(tmp_path):
    folder = tmp_path / "Models"
    model_folder(folder / "listed", "[1, 2]")
    model_folder(folder / "nothing", "null")
    entries = by_name({"HOME": str(tmp_path)}, [folder])
    assert entries["listed"].reason == "config.json holds an array, not a JSON object"
    assert entries["nothing"].reason == "config.json holds null, not a JSON object"


def test_an_unreadable_hub_repo_leaves_the_others_listed(tmp_path):
    """huggingface_hub's scanner skips a repo laid out wrongly but stops at one it cannot read
    (a ref that is a symlink loop, a ref that is not UTF-8): the other repos stay listed."""
    hub = tmp_path / "hub"
    write_hf_repo(hub, "org/good", model_folder(tmp_path / "src-good"))
    loop = write_hf_repo(hub, "org/loop", model_folder(tmp_path / "src-loop")).parent.parent
    (loop / "refs" / "loop").symlink_to("loop")
    binary = write_hf_repo(hub, "org/binary", model_folder(tmp_path / "src-binary")).parent.parent
    (binary / "refs" / "pr").write_bytes(b"\xff\xfe")
    entries = by_name({"HOME": str(tmp_path), "HF_HUB_CACHE": str(hub)})
    assert list(entries) == ["org/good"] and entries["org/good"].loadable
    (tmp_path / "looped-hub").symlink_to("looped-hub")  # the cache folder itself a loop: nothing
    assert scan_library(env={"HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "looped-hub")}) == []


def test_a_model_missing_weight_shards_cannot_be_loaded(tmp_path):
    """A download cut short: the index names two shards and one came (the other still a
    ``.incomplete`` blob), or a series of three without its second. Neither is loadable;
    a complete series is."""
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    partial = model_folder(tmp_path / "src", weights=shards[:1])
    (partial / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shards[0], "b": shards[1]}}))
    hub = tmp_path / "hub"
    repo = write_hf_repo(hub, "org/partial", partial).parent.parent
    (repo / "blobs" / ("0" * 64 + ".incomplete")).write_bytes(b"half")
    folder = tmp_path / "Models"
    model_folder(folder / "gap", weights=("model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"))
    model_folder(folder / "whole", weights=shards)
    entries = by_name({"HOME": str(tmp_path), "HF_HUB_CACHE": str(hub)}, [folder])
    cut = entries["org/partial"]
    assert (cut.loadable, cut.fits) == (False, None)
    assert cut.reason == (
        "the weights are incomplete: 1 of 2 files missing (model-00002-of-00002.safetensors)"
        " (a download of it is unfinished)"
    )
    gap = "the weights are incomplete: 1 of 3 files missing (model-00002-of-00003.safetensors)"
    assert entries["gap"].reason == gap
    assert entries["whole"].loadable and entries["whole"].reason == ""


SHRINK_THEN_READ = """
import os, sys
from pathlib import Path
from engine.library import gguf_header

parse = gguf_header._Parser.header

def shrink_then_parse(self):
    os.truncate(sys.argv[1], 100)  # rewritten by a download while the listing reads it
    return parse(self)

gguf_header._Parser.header = shrink_then_parse
try:
    gguf_header.read_header(Path(sys.argv[1]))
except gguf_header.GGUFHeaderError as exc:
    print("refused:", exc)
"""


def test_a_gguf_that_shrinks_while_it_is_read_is_refused_not_a_crash(tmp_path):
    """A memory map of a file that shrinks ends the process (SIGBUS) at the first read past the
    new end; the header is read with plain reads instead, which come back short."""
    from engine.models.load import default_model_path

    path = tmp_path / "shrinking.gguf"
    shutil.copy(default_model_path(), path)
    done = subprocess.run(
        [sys.executable, "-c", SHRINK_THEN_READ, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"exit code {done.returncode}: {done.stderr[-2000:]}"
    assert "refused: the file is truncated" in done.stdout
