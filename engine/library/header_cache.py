"""What each weight file's header said, kept between listings (``<cache dir>/library-headers.json``).

Walking a GGUF header means stepping over its vocabulary (a 262,144-token Gemma takes ~70 ms in
Python), and a quantized model's safetensors header is ~100 KB of JSON, so the facts the
listing needs are kept per file, keyed by its absolute path, size and
modification time: a file that changes is read again. Only what the header says is kept;
whether the engine takes it is decided afresh on every listing.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from engine.library.jsonfile import read_json

_VERSION = 1


class HeaderCache:
    def __init__(self, file: Path | None) -> None:
        self.file = file
        self.entries: dict[str, list[Any]] = {}
        self.used: set[str] = set()
        self.changed = False
        if file is not None:
            try:
                data = read_json(file)
                if isinstance(data, dict) and data.get("version") == _VERSION and isinstance(data.get("files"), dict):
                    self.entries = data["files"]
            except (OSError, ValueError):
                pass

    def get(self, path: Path, stat: os.stat_result) -> dict | None:
        key = str(path)
        entry = self.entries.get(key)
        if isinstance(entry, list) and len(entry) == 3 and entry[:2] == [stat.st_size, stat.st_mtime_ns]:
            self.used.add(key)
            return entry[2] if isinstance(entry[2], dict) else None
        return None

    def put(self, path: Path, stat: os.stat_result, facts: dict) -> None:
        key = str(path)
        self.entries[key] = [stat.st_size, stat.st_mtime_ns, facts]
        self.used.add(key)
        self.changed = True

    def save(self) -> None:
        """Write what this listing used (files gone from disk are dropped); never raises."""
        if self.file is None or (not self.changed and self.used == set(self.entries)):
            return
        kept = {k: v for k, v in self.entries.items() if k in self.used}
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd, staging = tempfile.mkstemp(prefix=".library-headers-", dir=self.file.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": _VERSION, "files": kept}, f)
            os.replace(staging, self.file)
        except OSError:
            pass
