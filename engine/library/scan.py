"""Every model on disk, source by source (docs/ENGINE.md, ``python -m engine models``).

Each scanner yields (source, name, path, Description); nothing here reads a weight file (headers
and stat() only) or imports MLX. A malformed model is described with the reason, never raised.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from engine.library.describe import Description, describe_folder, describe_gguf
from engine.library.entry import SOURCES, LibraryEntry
from engine.library.folders import added_folders
from engine.library.gguf_header import is_gguf
from engine.library.header_cache import HeaderCache
from engine.library.jsonfile import read_json
from engine.library.locations import (
    CONVERTER_VERSION,
    environment,
    hf_hub_cache,
    lmstudio_model_folders,
    logitscope_models,
    ollama_models,
)
from engine.library.memory import available_memory, fits, total_memory

Found = tuple[str, str, Path, Description]
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_OLLAMA_MODEL = "application/vnd.ollama.image.model"
_FOLDER_DEPTH = 3  # how deep an added folder is searched for models


def scan_library(folders: Iterable[str | os.PathLike] = (), env: Mapping[str, str] | None = None) -> list[LibraryEntry]:
    """Every model found, sorted by source (SOURCES' order) then name; see the module doc."""
    env = environment(env)
    extra = [*added_folders(env), *(Path(os.fspath(f)) for f in folders)]
    cache = HeaderCache(logitscope_models(env).parent / "library-headers.json")
    found: list[Found] = []
    for scanner in (_logitscope, _huggingface, _lmstudio, _ollama):
        found.extend(scanner(env, cache))
    found.extend(_folders(extra, cache))
    cache.save()
    total, available = total_memory(), available_memory()
    entries, seen = [], set()
    for source, name, path, d in found:
        key = os.path.realpath(path)
        if key in seen:  # the same model reached twice (an added folder inside LM Studio's)
            continue
        seen.add(key)
        loadable = not d.reason
        fit = fits(d.size_bytes, d.quantized, total, available) if loadable else None
        entries.append(
            LibraryEntry(
                source, name, str(path), d.format, d.architecture, d.quantization, d.size_bytes, loadable, d.reason, fit
            )
        )
    entries.sort(key=lambda e: (SOURCES.index(e.source), e.name.lower(), e.path))
    return entries


def _logitscope(env: Mapping[str, str], cache: HeaderCache) -> Iterator[Found]:
    """GGUF files Logitscope converted: named after the file they came from (source.json). Folders
    an older converter wrote are left out: loading their GGUF converts it again."""
    for folder in _children(logitscope_models(env)):
        if not folder.name.endswith(f"-v{CONVERTER_VERSION}") or not (folder / "config.json").is_file():
            continue  # a conversion under way (.converting-*), an older converter's, or not a model
        try:
            origin = read_json(folder / "source.json").get("gguf")
        except (OSError, ValueError, AttributeError):
            origin = None
        name = Path(origin).stem if isinstance(origin, str) and origin else folder.name
        yield "logitscope", name, folder, describe_folder(folder, cache=cache)


def _huggingface(env: Mapping[str, str], cache: HeaderCache) -> Iterator[Found]:
    """The hub cache through huggingface_hub's own scanner: one entry per model repo, its ``main``
    snapshot (else the newest); a snapshot of GGUF files gives one entry per file."""
    for repo in _hub_repos(hf_hub_cache(env)):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        revision = max(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
        snapshot = Path(revision.snapshot_path)
        if (snapshot / "config.json").is_file():
            d = describe_folder(snapshot, revision.size_on_disk, cache)
            if d.reason and any((repo.repo_path / "blobs").glob("*.incomplete")):
                d = replace(d, reason=f"{d.reason} (a download of it is unfinished)")
            yield "huggingface", repo.repo_id, snapshot, d
            continue
        for file in gguf_model_files(snapshot):
            yield "huggingface", f"{repo.repo_id}/{file.name}", file, _describe_gguf_file(file, cache)


def _hub_repos(hub: Path) -> Iterable:
    """The cached repos as huggingface_hub's scanner reads them. It leaves out a repo whose
    layout is broken, yet a repo it cannot read (a ref it cannot open or decode, a folder
    without permission) ends the whole scan: then each repo is scanned alone, through the
    scanner's own per-repo step, and only the unreadable ones are left out."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound, CorruptedCacheException

    try:
        return scan_cache_dir(hub).repos
    except CacheNotFound:
        return []
    except (OSError, ValueError, RuntimeError):  # RuntimeError: pathlib's "Symlink loop"
        pass
    try:
        from huggingface_hub.utils._cache_manager import _scan_cached_repo
    except ImportError:  # a huggingface_hub without it: nothing rather than a failed listing
        return []
    repos = []
    for folder in _children(Path(os.path.realpath(hub))):  # resolved, as scan_cache_dir's paths are
        try:
            repos.append(_scan_cached_repo(folder))
        except (CorruptedCacheException, OSError, ValueError, RuntimeError):
            continue
    return repos


def _lmstudio(env: Mapping[str, str], cache: HeaderCache) -> Iterator[Found]:
    """``<models>/<publisher>/<repo>/``: an MLX or safetensors folder, or GGUF files in it."""
    for root in lmstudio_model_folders(env):
        for publisher in _children(root):
            for repo in _children(publisher):
                label = f"{publisher.name}/{repo.name}"
                if (repo / "config.json").is_file():
                    yield "lmstudio", label, repo, describe_folder(repo, cache=cache)
                    continue
                for file in gguf_model_files(repo):
                    yield "lmstudio", f"{label}/{file.name}", file, _describe_gguf_file(file, cache)


def _ollama(env: Mapping[str, str], cache: HeaderCache) -> Iterator[Found]:
    """``manifests/<host>/<namespace>/<model>/<tag>`` -> the model layer's ``blobs/sha256-<hex>``."""
    root = ollama_models(env)
    for host in _children(root / "manifests"):
        for namespace in _children(host):
            for model in _children(namespace):
                for tag in _children(model, files=True):
                    name = _ollama_name(host.name, namespace.name, model.name, tag.name)
                    yield _ollama_entry(root, name, tag, cache)


def _ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """As ``ollama list`` shows it: the default registry and ``library`` namespace left out."""
    prefix = "" if host == "registry.ollama.ai" else f"{host}/"
    prefix += "" if namespace == "library" and not prefix else f"{namespace}/"
    return f"{prefix}{model}:{tag}"


def _ollama_entry(root: Path, name: str, manifest: Path, cache: HeaderCache) -> Found:
    try:
        data = read_json(manifest)
        layers = [x for x in data.get("layers", []) if isinstance(x, dict) and x.get("mediaType") == _OLLAMA_MODEL]
        digest = str(layers[0]["digest"]) if layers else ""
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return "ollama", name, manifest, Description("gguf", None, None, 0, "the manifest is not readable JSON", True)
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        return "ollama", name, manifest, Description("gguf", None, None, 0, "the manifest names no model layer", True)
    blob = root / "blobs" / digest.replace(":", "-")
    if not blob.is_file():
        reason = f"the model blob {blob.name} is missing"
        return "ollama", name, blob, Description("gguf", None, None, 0, reason, True)
    return "ollama", name, blob, describe_gguf(blob, cache)


def _folders(folders: list[Path], cache: HeaderCache) -> Iterator[Found]:
    for folder in folders:
        yield from _walk(folder, _FOLDER_DEPTH, cache)


def _walk(path: Path, depth: int, cache: HeaderCache) -> Iterator[Found]:
    if path.is_file():
        if path.suffix.lower() == ".gguf" or is_gguf(path):
            yield "folder", path.name, path.absolute(), _describe_gguf_file(path, cache)
        return
    if (path / "config.json").is_file():
        yield "folder", path.name, path.absolute(), describe_folder(path, cache=cache)
        return
    if depth <= 0:
        return
    for file in gguf_model_files(path):
        yield "folder", file.name, file.absolute(), _describe_gguf_file(file, cache)
    for child in _children(path):
        if not child.name.startswith("."):
            yield from _walk(child, depth - 1, cache)


def _describe_gguf_file(file: Path, cache: HeaderCache) -> Description:
    split = _SPLIT.search(file.name)
    d = describe_gguf(file, cache)
    if split and not d.reason:
        parts = int(split.group(2))
        reason = f"a GGUF split into {parts} files: the converter reads single-file GGUFs only"
        return Description(d.format, d.architecture, d.quantization, d.size_bytes, reason, d.quantized)
    return d


def gguf_model_files(folder: Path) -> list[Path]:
    """The GGUF models in a folder: vision projectors (mmproj) and later split parts left out."""
    files = []
    for file in _children(folder, files=True):
        if file.suffix.lower() != ".gguf" or file.name.lower().startswith("mmproj"):
            continue
        split = _SPLIT.search(file.name)
        if split and int(split.group(1)) != 1:
            continue
        files.append(file)
    return files


def _children(folder: Path, files: bool = False) -> list[Path]:
    """Sub-folders (or files) of ``folder``, sorted; none when it is missing or unreadable."""
    try:
        with os.scandir(folder) as it:
            items = [Path(e.path) for e in it if (e.is_file() if files else e.is_dir())]
    except OSError:
        return []
    return sorted(items)
