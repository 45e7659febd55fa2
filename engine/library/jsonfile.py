"""JSON files other programs wrote (config.json, LM Studio's settings, Ollama's manifests), read
so that their content can raise nothing but ValueError: ``json.loads`` raises RecursionError on
a value nested a few thousand levels deep, which would end the whole listing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """``path``'s JSON value; OSError when it cannot be read, ValueError when it is not UTF-8
    JSON or is nested too deeply to parse."""
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
