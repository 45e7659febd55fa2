"""The folders a user added to the library, kept in ``<config dir>/library.json``."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from engine.library.jsonfile import read_json
from engine.library.locations import config_dir, environment, home

_FILE = "library.json"


def _absolute(path: str | os.PathLike, env: Mapping[str, str]) -> Path:
    text = os.fspath(path)
    if text == "~" or text.startswith("~/"):
        return home(env) / text[2:]
    return Path(text).absolute()


def added_folders(env: Mapping[str, str] | None = None) -> list[Path]:
    """The persisted list (empty when there is none or the file is unreadable)."""
    file = config_dir(environment(env)) / _FILE
    try:
        data = read_json(file)
    except (OSError, ValueError):
        return []
    folders = data.get("folders") if isinstance(data, dict) else None
    return [Path(f) for f in folders if isinstance(f, str) and f] if isinstance(folders, list) else []


def add_folder(path: str | os.PathLike, env: Mapping[str, str] | None = None) -> None:
    env = environment(env)
    folder = _absolute(path, env)
    current = added_folders(env)
    if folder not in current:
        _save([*current, folder], env)


def remove_folder(path: str | os.PathLike, env: Mapping[str, str] | None = None) -> None:
    env = environment(env)
    folder = _absolute(path, env)
    current = added_folders(env)
    if folder in current:
        _save([f for f in current if f != folder], env)


def _save(folders: list[Path], env: Mapping[str, str]) -> None:
    """Written to a temporary file and renamed over the old one: never half a list."""
    target = config_dir(env) / _FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=".library-", dir=target.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"folders": [str(p) for p in folders]}, f, indent=2)
    os.replace(staging, target)
