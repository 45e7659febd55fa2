"""The model library (engine.library) on a home folder laid out like a Mac's (tests/support/library_home.py):
every source found with the fields it must have, malformed models listed with a reason and never
raised, each location rule (HF_HOME, HF_HUB_CACHE, LM Studio's configured folder, OLLAMA_MODELS)
honoured, added folders kept, every loadable entry loaded offline, and no MLX imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from engine.library import SOURCES, LibraryEntry, add_folder, added_folders, remove_folder, scan_library
from engine.library.gguf_header import GGUFHeaderError, read_header
from tests.support.library_home import Expected, MacHome, build_mac_home, write_hf_repo
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> MacHome:
    return build_mac_home(tmp_path_factory.mktemp("mac") / "Users" / "ada")


def check(entries: list[LibraryEntry], expected: list[Expected]) -> None:
    """``entries`` are exactly ``expected``, field by field."""
    assert [(e.source, e.name) for e in entries] == [(x.source, x.name) for x in expected]
    for e, x in zip(entries, expected, strict=True):
        got = (e.path, e.format, e.architecture, e.quantization, e.loadable)
        assert got == (x.path, x.format, x.architecture, x.quantization, x.loadable), e
        assert (x.reason in e.reason) if x.reason else e.reason == "", e
        assert e.fits is (True if x.loadable else None), e  # a few hundred KB fit anywhere
        assert e.size_bytes == (_size(Path(e.path)) if Path(e.path).exists() else 0), e


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def ordered(expected: list[Expected]) -> list[Expected]:
    return sorted(expected, key=lambda x: (SOURCES.index(x.source), x.name.lower(), x.path))


def test_every_source_is_listed_with_its_fields(home):
    check(scan_library(env=home.env), ordered(home.expected))


def test_given_folders_are_searched(home):
    check(scan_library([home.user_folder], env=home.env), ordered(home.expected + home.folder_expected))


def test_added_folders_persist_in_the_config_dir(home, tmp_path):
    env = home.env | {"LOGITSCOPE_CONFIG_DIR": str(tmp_path / "config")}
    add_folder(home.user_folder, env)
    add_folder(home.user_folder, env)  # once only
    assert added_folders(env) == [home.user_folder]
    saved = json.loads((tmp_path / "config" / "library.json").read_text())
    assert saved == {"folders": [str(home.user_folder)]}
    check(scan_library(env=env), ordered(home.expected + home.folder_expected))
    remove_folder(str(home.user_folder), env)
    assert added_folders(env) == []
    check(scan_library(env=env), ordered(home.expected))


def test_config_dir_defaults_under_home(home, tmp_path):
    env = {"HOME": str(tmp_path)}
    add_folder("~/Models", env)
    assert added_folders(env) == [tmp_path / "Models"]
    assert len(list(tmp_path.rglob("logitscope/library.json"))) == 1
    remove_folder(tmp_path / "Models", env)
    assert added_folders(env) == []


def test_hf_home_and_hf_hub_cache_are_honoured(home, tmp_path):
    hub_ids = [x.name for x in home.expected if x.source == "huggingface"]
    elsewhere = tmp_path / "hf-home"
    shutil.copytree(home.hub, elsewhere / "hub", symlinks=True)
    listed = {e.name for e in scan_library(env={"HOME": str(tmp_path), "HF_HOME": str(elsewhere)})}
    assert listed == set(hub_ids)
    moved = tmp_path / "hub-cache"
    shutil.copytree(home.hub, moved, symlinks=True)
    env = {"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "empty"), "HF_HUB_CACHE": str(moved)}
    entries = scan_library(env=env)
    assert {e.name for e in entries} == set(hub_ids)
    assert all(e.path.startswith(str(moved)) for e in entries)
    xdg = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(home.root / ".cache")}
    assert {e.name for e in scan_library(env=xdg)} == set(hub_ids)


def test_lmstudio_configured_folder_and_home_pointer(home, tmp_path):
    models = tmp_path / "External" / "LLMs"
    shutil.copytree(home.lmstudio, models)
    user = tmp_path / "user"
    (user / ".lmstudio").mkdir(parents=True)
    (user / ".lmstudio" / "settings.json").write_text(json.dumps({"downloadsFolder": str(models)}))
    names = sorted(x.name for x in home.expected if x.source == "lmstudio")
    listed = scan_library(env={"HOME": str(user)})
    assert sorted(e.name for e in listed) == names
    assert all(e.path.startswith(str(models)) for e in listed)
    # A moved data folder: ~/.lmstudio-home-pointer names it; its models/ is the default there.
    moved = tmp_path / "moved"
    shutil.copytree(home.lmstudio, moved / "lms" / "models")
    (moved / ".lmstudio-home-pointer").write_text(str(moved / "lms") + "\n")
    assert sorted(e.name for e in scan_library(env={"HOME": str(moved)})) == names
    # The older location (~/.cache/lm-studio/models) is still searched.
    old = tmp_path / "old"
    shutil.copytree(home.lmstudio, old / ".cache" / "lm-studio" / "models")
    assert sorted(e.name for e in scan_library(env={"HOME": str(old)})) == names


def test_ollama_models_variable_is_honoured(home, tmp_path):
    shutil.copytree(home.ollama, tmp_path / "ollama")
    entries = scan_library(env={"HOME": str(tmp_path / "nobody"), "OLLAMA_MODELS": str(tmp_path / "ollama")})
    assert [(e.name, e.loadable) for e in entries] == [("tinyllama:latest", True), ("tinyllama:partial", False)]


def test_malformed_models_are_listed_with_a_reason(home, tmp_path):
    """Garbage in every source: listed with the reason, nothing raised, nothing else dropped."""
    bad = tmp_path / "bad"
    shutil.copytree(home.root, bad, symlinks=True)
    lms = bad / ".lmstudio" / "models" / "junk" / "junk-GGUF"
    lms.mkdir(parents=True)
    (lms / "random.gguf").write_bytes(os.urandom(4096))
    (lms / "empty.gguf").write_bytes(b"")
    (lms / "huge-count.gguf").write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1 << 60).to_bytes(8, "little") * 2)
    folder = bad / ".lmstudio" / "models" / "junk" / "bad-config"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    manifests = bad / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library" / "junk"
    manifests.mkdir(parents=True)
    (manifests / "latest").write_text("{not json")
    (manifests / "empty").write_text(json.dumps({"layers": []}))
    blob = next(p for p in (bad / ".ollama" / "models" / "blobs").iterdir() if p.stat().st_size > 100_000)
    blob.write_bytes(blob.read_bytes()[:5000])  # the good model's blob cut short
    env = home.env | {"HOME": str(bad), "LOGITSCOPE_CACHE_DIR": str(bad / "Library" / "Caches" / "logitscope")}
    entries = scan_library(env=env)
    reasons = {e.name: e.reason for e in entries}
    assert (
        "not a readable GGUF file (it does not start with the GGUF magic bytes)"
        in reasons["junk/junk-GGUF/random.gguf"]
    )
    assert "shorter than a GGUF header" in reasons["junk/junk-GGUF/empty.gguf"]
    assert "more entries than the file can hold" in reasons["junk/junk-GGUF/huge-count.gguf"]
    assert "config.json is not valid JSON" in reasons["junk/bad-config"]
    assert reasons["junk:latest"] == "the manifest is not readable JSON"
    assert reasons["junk:empty"] == "the manifest names no model layer"
    assert "truncated" in reasons["tinyllama:latest"]
    assert len(entries) == len(home.expected) + 6


def test_header_reader_agrees_with_the_converters_reader_and_never_crashes(home):
    from engine.models.gguf_read import read_gguf

    path = Path(next(x.path for x in home.expected if x.source == "lmstudio" and x.loadable and x.format == "gguf"))
    full = read_gguf(path)
    header = read_header(path)
    assert header.architecture == full.metadata["general.architecture"]
    assert sum(header.tensor_types.values()) == len(full.tensors)
    assert set(header.tensor_types) == {t.type_name for t in full.tensors.values()}
    data = path.read_bytes()
    cut = path.parent.parent / "cut.gguf"
    try:
        for n in range(0, len(data), 997):  # every prefix of the file is refused cleanly
            cut.write_bytes(data[:n])
            with pytest.raises(GGUFHeaderError):
                read_header(cut)
    finally:
        cut.unlink(missing_ok=True)


def test_listing_imports_no_mlx(home):
    code = (
        "import json, sys; from engine.library import scan_library; "
        "n = len(scan_library(env=json.loads(sys.argv[1]))); "
        "print(n, sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')))"
    )
    out = subprocess.run([sys.executable, "-c", code, json.dumps(home.env)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(home.expected)), "[]"]


def test_every_loadable_entry_loads_offline(home, monkeypatch):
    """What the listing offers as ``--model`` (paths, and the cached repo ids) loads with the
    network off, and its model computes a next token."""
    from engine.models.load import load

    for key in [k for k in os.environ if k.startswith(("HF_", "HUGGINGFACE_", "XDG_", "OLLAMA_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home.root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    entries = scan_library([home.user_folder], env=home.env)
    sources = [e.model_source for e in entries if e.loadable]
    assert sorted(sources) == sorted(home.loadable_sources())
    for source in sources:
        loaded = load(source)
        logits = loaded.model(mx.array([[1, 2, 3]]))[0, -1]
        assert 0 <= int(mx.argmax(logits).item()) < loaded.vocab_size, source
        if source in home.repo_ids:
            assert loaded.name == source


def test_a_repo_of_gguf_files_is_listed_per_file(home, tmp_path):
    """A cached GGUF repo (no config.json): one entry per GGUF, loaded by its path."""
    gguf = Path(next(x.path for x in home.expected if x.source == "lmstudio" and x.format == "gguf" and x.loadable))
    files = tmp_path / "files"
    files.mkdir()
    shutil.copy(gguf, files / "tiny-Q8_0.gguf")
    (files / "mmproj-tiny-f16.gguf").write_bytes(gguf.read_bytes())  # a vision projector: not a model
    snapshot = write_hf_repo(tmp_path / "hub", "bartowski/tiny-GGUF", files)
    entries = scan_library(env={"HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert [(e.name, e.path, e.quantization, e.loadable) for e in entries] == [
        ("bartowski/tiny-GGUF/tiny-Q8_0.gguf", str(snapshot / "tiny-Q8_0.gguf"), "Q8_0", True)
    ]
    assert entries[0].model_source == entries[0].path


def test_gguf_headers_are_read_once_until_the_file_changes(home, tmp_path, monkeypatch):
    from engine.library import describe

    shutil.copytree(home.lmstudio, tmp_path / ".lmstudio" / "models")
    env = {"HOME": str(tmp_path)}
    first = scan_library(env=env)
    assert (tmp_path / ".cache" / "logitscope" / "library-headers.json").is_file()
    read: list[Path] = []
    real = describe.read_header
    monkeypatch.setattr(describe, "read_header", lambda p: read.append(p) or real(p))
    assert scan_library(env=env) == first and read == []
    gguf = next(Path(e.path) for e in first if e.format == "gguf" and e.loadable)
    gguf.write_bytes(gguf.read_bytes()[:-4])  # changed: read again, and now truncated
    again = {e.path: e for e in scan_library(env=env)}
    assert read == [gguf]
    assert "truncated" in again[str(gguf)].reason


def test_a_cached_repo_id_resolves_under_hf_home_offline(home, tmp_path, monkeypatch):
    """HF_HOME moves the cache the repo id is looked up in; outside it, the id is handed on."""
    from engine.models.load import resolve

    shutil.copytree(home.hub, tmp_path / "hf" / "hub", symlinks=True)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    repo = home.repo_ids[0]
    name, target = resolve(repo)
    cached = tmp_path / "hf" / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots"
    assert name == repo and Path(target).parent == cached
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    assert resolve(repo) == (repo, repo)


def test_ollama_names_follow_ollama_list():
    from engine.library.scan import _ollama_name

    assert _ollama_name("registry.ollama.ai", "library", "llama3.2", "3b") == "llama3.2:3b"
    assert _ollama_name("registry.ollama.ai", "alice", "tiny", "latest") == "alice/tiny:latest"
    assert _ollama_name("hf.co", "bartowski", "Qwen3-GGUF", "Q4_K_M") == "hf.co/bartowski/Qwen3-GGUF:Q4_K_M"


def test_a_cached_gguf_repo_id_loads_its_one_model_beside_a_vision_projector(home, tmp_path, monkeypatch):
    """``--model <repo id>`` of a cached GGUF repo holding one model and its ``mmproj`` file:
    the model is converted, as the listing offers it; the projector is not a second model."""
    from engine.models.load import resolve

    gguf = Path(next(x.path for x in home.expected if x.source == "lmstudio" and x.format == "gguf" and x.loadable))
    files = tmp_path / "files"
    files.mkdir()
    shutil.copy(gguf, files / "tiny-Q8_0.gguf")
    shutil.copy(gguf, files / "mmproj-tiny-f16.gguf")
    write_hf_repo(tmp_path / "hub", "bartowski/tiny-GGUF", files)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LOGITSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    name, target = resolve("bartowski/tiny-GGUF")
    assert name == "bartowski/tiny-GGUF" and Path(target).parent == tmp_path / "cache" / "models"
    assert json.loads((Path(target) / "config.json").read_text())["model_type"] == "llama"
