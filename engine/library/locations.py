"""Where each source keeps its models, worked out from an environment mapping (HOME, XDG_CACHE_HOME,
HF_HOME, HF_HUB_CACHE, OLLAMA_MODELS, LOGITSCOPE_CACHE_DIR, LOGITSCOPE_CONFIG_DIR) rather than
from the process's own, so a test or a caller can point every scanner at another home folder.

The rules follow each program's own:

- Hugging Face: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
  else ``~/.cache/huggingface/hub`` (huggingface_hub's ``constants``).
- LM Studio: its data folder is the path in ``~/.lmstudio-home-pointer`` when that file exists,
  else ``~/.lmstudio``, else the older ``~/.cache/lm-studio``; its models folder is
  ``downloadsFolder`` in that data folder's ``settings.json`` (or in
  ``~/Library/Application Support/LM Studio/settings.json``, where older versions kept it),
  else ``<data folder>/models``. The older ``~/.cache/lm-studio/models`` is scanned too.
- Ollama: ``OLLAMA_MODELS``, else ``~/.ollama/models``.
- Logitscope: ``LOGITSCOPE_CACHE_DIR/models``, else platformdirs' user cache folder
  (``engine.models.load.cache_root``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import platformdirs

from engine.library.jsonfile import read_json

# The suffix of Logitscope's converted folders (``<hash>-v4``): bumped when the GGUF converter's
# output changes, which leaves the older folders unused (engine.models.load.converted_folder).
CONVERTER_VERSION = "4"


def environment(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def _expand(value: str, env: Mapping[str, str]) -> Path:
    """``~`` as the given HOME, not the process's."""
    if value == "~" or value.startswith("~/"):
        return home(env) / value[2:]
    return Path(value)


def hf_hub_cache(env: Mapping[str, str]) -> Path:
    if env.get("HF_HUB_CACHE"):
        return _expand(env["HF_HUB_CACHE"], env)
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return _expand(env["HUGGINGFACE_HUB_CACHE"], env)
    if env.get("HF_HOME"):
        return _expand(env["HF_HOME"], env) / "hub"
    xdg = env.get("XDG_CACHE_HOME")
    base = _expand(xdg, env) if xdg else home(env) / ".cache"
    return base / "huggingface" / "hub"


def logitscope_models(env: Mapping[str, str]) -> Path:
    override = env.get("LOGITSCOPE_CACHE_DIR")
    if override:
        return _expand(override, env) / "models"
    # platformdirs reads the process's HOME: for another mapping, work it out from its HOME
    own = env is os.environ
    return (Path(platformdirs.user_cache_dir("logitscope")) if own else _platform_dir(env, "cache")) / "models"


def config_dir(env: Mapping[str, str]) -> Path:
    override = env.get("LOGITSCOPE_CONFIG_DIR")
    if override:
        return _expand(override, env)
    if env is os.environ:
        return Path(platformdirs.user_config_dir("logitscope"))
    return _platform_dir(env, "config")


def _platform_dir(env: Mapping[str, str], kind: str) -> Path:
    """platformdirs' folder for ``logitscope`` under the given HOME (macOS and XDG rules)."""
    root = home(env)
    if sys.platform == "darwin":
        sub = "Library/Caches" if kind == "cache" else "Library/Application Support"
        return root / sub / "logitscope"
    var = "XDG_CACHE_HOME" if kind == "cache" else "XDG_CONFIG_HOME"
    default = root / (".cache" if kind == "cache" else ".config")
    return (_expand(env[var], env) if env.get(var) else default) / "logitscope"


def lmstudio_model_folders(env: Mapping[str, str]) -> list[Path]:
    """LM Studio's models folders that exist: the configured one first, then the defaults."""
    root = home(env)
    data_dirs = [root / ".lmstudio", root / ".cache" / "lm-studio"]
    pointer = root / ".lmstudio-home-pointer"
    try:
        pointed = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        pointed = ""
    if pointed:
        data_dirs.insert(0, _expand(pointed, env))
    settings = [d / "settings.json" for d in data_dirs]
    settings.append(root / "Library" / "Application Support" / "LM Studio" / "settings.json")
    candidates = [folder for file in settings if (folder := _downloads_folder(file, env))]
    candidates += [d / "models" for d in data_dirs]
    found: list[Path] = []
    for folder in candidates:
        if folder.is_dir() and all(not _same(folder, seen) for seen in found):
            found.append(folder)
    return found


def _downloads_folder(settings: Path, env: Mapping[str, str]) -> Path | None:
    try:
        value = read_json(settings).get("downloadsFolder")
    except (OSError, ValueError, AttributeError):
        return None
    return _expand(value, env) if isinstance(value, str) and value else None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def ollama_models(env: Mapping[str, str]) -> Path:
    override = env.get("OLLAMA_MODELS")
    return _expand(override, env) if override else home(env) / ".ollama" / "models"


def cached_snapshot(repo_id: str, env: Mapping[str, str]) -> Path | None:
    """The cached snapshot folder of a Hugging Face model repo (its ``main`` ref), found offline
    through huggingface_hub's cache API; None when the repo is not in the cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, local_files_only=True, cache_dir=hf_hub_cache(env))
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        return None
    return Path(folder) if Path(folder).is_dir() else None
