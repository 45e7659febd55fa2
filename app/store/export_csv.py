"""CSV exports (Qt-free): one row per token × candidate × stage, from an export's records
(:func:`app.store.export.records`); docs/EXPORT.md lists the columns and reads them with pandas."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.api.codec import RecordType
from engine.api.events import same_token

CSV_COLUMNS = (
    "message",
    "branch",
    "index",
    "token_id",
    "text",
    "chosen_logprob",
    "rank",
    "candidate_rank",
    "candidate_id",
    "candidate_text",
    "chosen",
    "stage",
    "stage_index",
    "logprob",
    "removed_by",
    "raw_logit",
    "entropy",
    "survivors",
    "interrupted",
    "phase",
    "draft_outcome",
    "draft_token_id",
    "draft_logprob",
    "draft_target_logprob",
    "grammar_allowed",
    "grammar_removed",
    "grammar_removed_raw",
    "grammar_forced",
    "grammar_wanted",
    "grammar_left",
    "grammar_accepting",
)


def csv_rows(recs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """One row per token × candidate × stage (``logprob`` empty once removed; ``token_id``
    and ``candidate_id`` empty where a server did not report the id; ``interrupted`` 1 for
    the tokens of a reply or scored text the app stopped while writing; ``phase`` thinking
    or answer for a reasoning model's token, else empty; ``draft_*`` what a draft model
    proposed at the token, empty without one; ``grammar_*`` what the grammar did at the
    token, empty without one)."""
    interrupted = 0
    for r in recs:
        if r.get("type") in ("branch", "score"):  # the records that place the tokens after them
            interrupted = int(bool(r.get("interrupted")))
        if r.get("type") != RecordType.TOKEN:
            continue
        chain = r["chain"]
        draft = r.get("draft") or {}
        drafted = {
            "draft_outcome": draft.get("outcome", ""),
            "draft_token_id": draft.get("token_id", ""),
            "draft_logprob": draft.get("logprob", ""),
            "draft_target_logprob": draft.get("target_logprob", ""),
        }
        grammar = r.get("grammar")
        constrained = {f"grammar_{k}": "" for k in _GRAMMAR_KEYS}
        if grammar:
            constrained.update({f"grammar_{k}": _cell(grammar.get(k)) for k in _GRAMMAR_KEYS})
        for k, c in enumerate(r["top"]):
            for si, stage in enumerate(chain):
                yield {
                    "message": r.get("message", ""),
                    "branch": r.get("branch", ""),
                    "index": r["index"],
                    "token_id": r["token_id"],
                    "text": r["text"],
                    "chosen_logprob": r["logprob"],
                    "rank": r.get("rank", ""),
                    "candidate_rank": k + 1,
                    "candidate_id": c["token_id"],
                    "candidate_text": c["text"],
                    "chosen": int(same_token(c["token_id"], c["text"], r["token_id"], r.get("piece", r["text"]))),
                    "stage": stage,
                    "stage_index": si,
                    "logprob": c["logprobs"].get(stage),
                    "removed_by": c["removed_by"] or "",
                    "raw_logit": c["raw_logit"],
                    "entropy": r["entropies"].get(stage),
                    "survivors": (r.get("survivors") or {}).get(stage),
                    "interrupted": interrupted,
                    "phase": r.get("phase") or "",  # empty: a model without reasoning markers
                    **drafted,
                    **constrained,
                }


_GRAMMAR_KEYS = ("allowed", "removed", "removed_raw", "forced", "wanted", "left", "accepting")


def _cell(value: Any) -> Any:
    """A flag as 0 / 1 (a column pandas reads as numbers), anything else as it is."""
    return int(value) if isinstance(value, bool) else value


def write_rows(rows: Iterable[dict[str, Any]], columns: Sequence[str], path: str | Path) -> int:
    """``rows`` as a CSV file with a header of ``columns`` (an unknown value: an empty cell);
    returns the rows written. Every CSV export writes through here."""
    n = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
            n += 1
    return n


def write_csv(recs: Iterable[dict[str, Any]], path: str | Path) -> int:
    return write_rows(csv_rows(recs), CSV_COLUMNS, path)
