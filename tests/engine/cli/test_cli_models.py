"""``python -m engine models`` as a subprocess on a home folder laid out like a Mac's
(tests/support/library_home.py): the JSON Lines records, the table, the persisted folders, and a cached
repo id and an Ollama blob generating through ``python -m engine generate`` with the network off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.library import SOURCES
from tests.support.library_home import MacHome, build_mac_home
from tests.support.paths import ROOT

FIELDS = [
    "source",
    "name",
    "path",
    "format",
    "architecture",
    "quantization",
    "size_bytes",
    "loadable",
    "reason",
    "fits",
]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> MacHome:
    return build_mac_home(tmp_path_factory.mktemp("mac") / "Users" / "grace")


def engine(home: MacHome, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], cwd=ROOT, env=home.process_env(), capture_output=True, text=True
    )


def records(home: MacHome, *args: str) -> list[dict]:
    proc = engine(home, "models", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def ordered(expected: list) -> list:
    """As the listing sorts: by source (SOURCES' order), then name, then path."""
    return sorted(expected, key=lambda x: (SOURCES.index(x.source), x.name.lower(), x.path))


def expected_records(expected) -> list[dict]:
    """What each line must hold (size_bytes from stat(): 0 for a missing blob)."""
    out = []
    for x in ordered(expected):
        path = Path(x.path)
        size = 0 if not path.exists() else path.stat().st_size if path.is_file() else _folder(path)
        out.append(
            {
                "source": x.source,
                "name": x.name,
                "path": x.path,
                "format": x.format,
                "architecture": x.architecture,
                "quantization": x.quantization,
                "size_bytes": size,
                "loadable": x.loadable,
                "fits": True if x.loadable else None,
            }
        )
    return out


def _folder(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def without_reason(got: list[dict], expected) -> list[dict]:
    assert len(got) == len(expected)
    for record, x in zip(got, ordered(expected), strict=True):
        assert (x.reason in record["reason"]) if x.reason else record["reason"] == "", record
    return [{k: v for k, v in r.items() if k != "reason"} for r in got]


def test_json_lists_exactly_the_expected_records(home):
    got = records(home)
    assert all(list(r) == FIELDS for r in got)
    assert without_reason(got, home.expected) == expected_records(home.expected)


def test_folder_flag_and_persisted_folders(home):
    every = home.expected + home.folder_expected
    assert without_reason(records(home, "--folder", str(home.user_folder)), every) == expected_records(every)
    assert without_reason(records(home, "--add-folder", str(home.user_folder)), every) == expected_records(every)
    assert without_reason(records(home), every) == expected_records(every)  # kept for the next run
    config = list(home.root.rglob("logitscope/library.json"))
    assert [json.loads(p.read_text()) for p in config] == [{"folders": [str(home.user_folder)]}]
    got = records(home, "--remove-folder", str(home.user_folder))
    assert without_reason(got, home.expected) == expected_records(home.expected)
    assert without_reason(records(home), home.expected) == expected_records(home.expected)


def test_table_is_aligned_with_a_reason_column(home):
    proc = engine(home, "models")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["SOURCE", "NAME", "FORMAT", "ARCH", "QUANT", "SIZE", "FITS", "PATH", "REASON"]
    assert len(lines) == 1 + len(home.expected)
    reason_at = lines[0].index("REASON")
    path_at = lines[0].index("PATH")
    for line, x in zip(lines[1:], ordered(home.expected), strict=True):
        assert line.startswith(x.source)
        assert line[path_at:].startswith(x.path)
        assert line[reason_at:].startswith("loadable") if x.loadable else x.reason in line[reason_at:]


def test_cached_repo_id_and_ollama_blob_generate_offline(home):
    """The listing's ``--model`` for a cached repo (its name) and an Ollama model (its blob path)
    generates a token through the CLI with HF_HUB_OFFLINE=1."""
    listed = records(home)
    repo = next(r for r in listed if r["source"] == "huggingface" and r["format"] == "mlx")
    blob = next(r for r in listed if r["source"] == "ollama" and r["loadable"])
    for model in (repo["name"], blob["path"]):
        proc = engine(home, "generate", "--model", model, "--prompt", "the", "--max-tokens", "1", "--temperature", "0")
        assert proc.returncode == 0, (model, proc.stderr)
        tokens = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [t["type"] for t in tokens] == ["token", "done"], tokens


def test_unloadable_models_never_fail_the_command(home):
    got = {r["name"]: r for r in records(home)}
    assert "truncated" in got["lmstudio-community/broken-GGUF/broken-Q8_0.gguf"]["reason"]
    assert "'mamba'" in got["second-state/tiny-mamba-GGUF/tiny-mamba-F32.gguf"]["reason"]
    proc = engine(home, "generate", "--model", got["tinyllama:partial"]["path"], "--prompt", "x", "--max-tokens", "1")
    assert proc.returncode != 0 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


def test_adding_a_missing_folder_is_a_usage_error(home):
    before = [p.read_text() for p in home.root.rglob("logitscope/library.json")]
    proc = engine(home, "models", "--add-folder", str(home.root / "no-such-folder"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: --add-folder") and proc.stdout == ""
    assert [p.read_text() for p in home.root.rglob("logitscope/library.json")] == before
