"""The logit lens's records, as ``python -m engine lens`` prints them and the app exports
them (one builder for both, importable without MLX): per position, one ``layer`` record per
layer 0 (the embedding output) … L, then one ``position`` record. docs/ENGINE.md ("lens")
and docs/EXPORT.md list the fields."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from engine.api.codec import CLI


def layer_record(layer: Any, piece: Callable[[int], str]) -> dict[str, Any]:
    """One ``engine.api.results.LensLayer`` (numbers rounded by the CLI's style)."""
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
        "final_top_logprobs": [CLI.number(v) for v in getattr(layer, "final_top_logprobs", ())],
    }


def position_record(row: Any, piece: Callable[[int], str]) -> dict[str, Any]:
    """One ``engine.api.results.LensPosition``'s summary."""
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
