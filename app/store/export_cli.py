"""``python -m app export --out FILE.jsonl|FILE.csv [--db PATH] [--conversation ID | --all]``:
saved conversations out of the app's database without opening a window (no Qt, no MLX).

One conversation gives one export (every branch). ``--all`` writes every conversation into
FILE (one header per conversation: split on ``"type": "header"``), or for CSV, every row with
a leading ``conversation`` column. Errors: one line on stderr, exit 1 (usage: 2).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path


def default_db() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("logitscope")) / "logitscope.sqlite3"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app export", description="export saved conversations")
    p.add_argument("--out", required=True, help="FILE.jsonl (JSON Lines) or FILE.csv")
    p.add_argument("--db", default=None, help=f"the app's database (default: {default_db()})")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--conversation", type=int, default=None, help="a conversation id (default: the newest)")
    which.add_argument("--all", action="store_true", help="every conversation")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    from app.store.export import records
    from app.store.export_csv import CSV_COLUMNS, csv_rows
    from app.store.export_store import from_store
    from app.store.store import Store

    db = Path(args.db) if args.db else default_db()
    if not db.exists():
        print(f"error: no database at {db}", file=sys.stderr)
        return 1
    try:
        store = Store(db)
    except Exception as exc:
        print(f"error: cannot open {db}: {exc}", file=sys.stderr)
        return 1
    try:
        conversations = store.reads.conversations()
        if args.all:
            ids = [c.id for c in reversed(conversations)]
        elif args.conversation is not None:
            ids = [args.conversation]
        else:
            ids = [conversations[0].id] if conversations else []
        if not ids:
            print("error: the database holds no conversation", file=sys.stderr)
            return 1
        per: list[tuple[int, list[dict]]] = []
        for cid in ids:
            try:
                per.append((cid, records(from_store(store, cid))))
            except KeyError:
                print(f"error: no conversation {cid} in {db}", file=sys.stderr)
                return 1
    finally:
        store.close()
    out = Path(args.out)
    try:
        if out.suffix.lower() == ".csv":
            with open(out, "w", encoding="utf-8", newline="") as f:
                columns = (["conversation"] if args.all else []) + list(CSV_COLUMNS)
                writer = csv.DictWriter(f, fieldnames=columns)
                writer.writeheader()
                for cid, recs in per:
                    for row in csv_rows(recs):
                        row = {k: "" if v is None else v for k, v in row.items()}
                        writer.writerow({"conversation": cid, **row} if args.all else row)
        else:
            with open(out, "w", encoding="utf-8") as f:
                for _, recs in per:
                    for r in recs:
                        f.write(json.dumps(r, ensure_ascii=False) + "\n")
    except OSError as exc:
        print(f"error: cannot write {out}: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0
