"""The logit lens's export (File → Export → This logit lens…), Qt-free: JSON Lines holding
the records ``python -m engine lens`` prints (``engine/cli_lens.py``), for every position of
the reply read so far: one ``layer`` record per layer (0, the embedding output, … L), then
one ``position`` record. Positions count from the reply's first token (the CLI's from the
prompt's first: for a text scored without a prompt the two are the same). docs/EXPORT.md
lists the fields."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from engine.codec import CLI


def layer_record(layer: Any, piece: Callable[[int], str]) -> dict[str, Any]:
    """One ``engine.lens.LensLayer`` as the CLI writes it (numbers rounded by its style)."""
    return {
        "type": "layer",
        "position": layer.position,
        "layer": layer.layer,
        "top": [{"token_id": t, "text": piece(t), "logprob": CLI.number(lp)} for t, lp in layer.top],
        "entropy": CLI.number(layer.entropy),
        "kl_final": CLI.number(layer.kl_final),
        "rank_final_top1": layer.rank_final_top1,
        "rank_chosen": layer.rank_chosen,
        "chosen_logprob": CLI.number(layer.chosen_logprob),
    }


def position_record(row: Any, piece: Callable[[int], str]) -> dict[str, Any]:
    """One ``engine.lens.LensPosition``'s summary as the CLI writes it."""
    return {
        "type": "position",
        "position": row.position,
        "chosen": row.chosen,
        "text": piece(row.chosen),
        "chosen_is_next": row.chosen_is_next,
        "decided_at": row.decided_at,
    }


def lens_records(rows: Iterable[Any], piece: Callable[[int], str]) -> list[dict[str, Any]]:
    """Each position's layer records, then its position record, in the order given."""
    records: list[dict[str, Any]] = []
    for row in rows:
        records += [layer_record(layer, piece) for layer in row.layers]
        records.append(position_record(row, piece))
    return records


def write_lens(records: Iterable[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path
