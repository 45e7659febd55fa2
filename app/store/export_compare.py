"""Exports of a model comparison (Models → Compare models…), Qt-free: JSON Lines holding
``python -m engine kld``'s records for the compared tokens (one ``token`` record each, then
the ``summary``; shaped by :mod:`engine.api.kld_records`), or CSV with one row per token.
docs/EXPORT.md lists the fields."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from app.store.export_csv import write_rows

COMPARE_CSV_COLUMNS = (
    "index",
    "token_id",
    "text",
    "kld",
    "same_top",
    "p_base",
    "p_model",
    "logprob_base",
    "logprob_model",
    "top_base_id",
    "top_base_text",
    "top_base_logprob",
    "top_model_id",
    "top_model_text",
    "top_model_logprob",
    "base",
    "base_precision",
    "model",
    "precision",
)
"""The token record's numbers, each model's most likely token, and the models' names (the
same on every row: a CSV has no summary line to hold them)."""


def compare_csv_rows(records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    records = list(records)
    about = next((r for r in records if r.get("type") == "summary"), {})
    names = {k: about.get(k, "") for k in ("base", "base_precision", "model", "precision")}
    for r in records:
        if r.get("type") != "token":
            continue
        base, model = (r["top_base"] or [{}])[0], (r["top_model"] or [{}])[0]
        yield {
            **{k: r[k] for k in COMPARE_CSV_COLUMNS[:9]},
            "same_top": int(r["same_top"]),
            "top_base_id": base.get("token_id"),
            "top_base_text": base.get("text"),
            "top_base_logprob": base.get("logprob"),
            "top_model_id": model.get("token_id"),
            "top_model_text": model.get("text"),
            "top_model_logprob": model.get("logprob"),
            **names,
        }


def write_compare(records: list[dict[str, Any]], path: str | Path) -> int:
    """JSON Lines, or CSV when ``path`` ends in ``.csv``; returns the records (rows) written."""
    if str(path).lower().endswith(".csv"):
        return write_rows(compare_csv_rows(records), COMPARE_CSV_COLUMNS, path)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return len(records)
