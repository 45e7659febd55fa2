"""The logit lens's export (File → Export → This logit lens…), Qt-free: JSON Lines holding
the records ``python -m engine lens`` prints (built by ``engine/api/lens_records.py`` for both), for every position of
the reply read so far: one ``layer`` record per layer (0, the embedding output, … L), then
one ``position`` record. Positions count from the reply's first token (the CLI's from the
prompt's first: for a text scored without a prompt the two are the same). docs/EXPORT.md
lists the fields."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.api.lens_records import lens_records

__all__ = ["lens_records", "write_lens"]


def write_lens(records: Iterable[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path
