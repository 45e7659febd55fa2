"""``python -m engine models``: every model on disk (engine.library), as a table or JSON Lines.

``--json`` prints one object per model (``LibraryEntry.as_record``: source, name, path, format,
architecture, quantization, size_bytes, loadable, reason, fits); the text form is an aligned
table with a reason column. ``--add-folder`` / ``--remove-folder`` change the folders the
library always searches (kept in ``<config dir>/library.json``), then list.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.library import LibraryEntry, add_folder, remove_folder, scan_library
from engine.library.entry import human_size

_COLUMNS = ("SOURCE", "NAME", "FORMAT", "ARCH", "QUANT", "SIZE", "FITS", "PATH", "REASON")


def add_models_command(commands) -> None:
    p = commands.add_parser("models", help="list the models on disk (HF cache, LM Studio, Ollama, folders)")
    p.add_argument("--json", action="store_true", help="one JSON object per model")
    p.add_argument("--folder", action="append", default=[], metavar="DIR", help="also search DIR (repeatable)")
    p.add_argument("--add-folder", action="append", default=[], metavar="DIR", help="always search DIR from now on")
    p.add_argument("--remove-folder", action="append", default=[], metavar="DIR", help="stop searching DIR")


def models_command(args: argparse.Namespace) -> int:
    for folder in args.add_folder:
        if not Path(folder).expanduser().exists():
            print(f"error: --add-folder {folder}: no such file or folder", file=sys.stderr)
            return 2
        add_folder(Path(folder).expanduser())
    for folder in args.remove_folder:
        remove_folder(folder)
    entries = scan_library(args.folder)
    out = sys.stdout
    if args.json:
        for entry in entries:
            out.write(json.dumps(entry.as_record()) + "\n")
    else:
        out.write(table(entries))
    out.flush()
    return 0


def table(entries: list[LibraryEntry]) -> str:
    """The entries as aligned columns, the reason last (it may be long)."""
    rows = [_COLUMNS] + [_row(e) for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows]
    if not entries:
        lines.append("(no models found)")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _row(e: LibraryEntry) -> tuple[str, ...]:
    fits = "?" if e.fits is None else ("yes" if e.fits else "no")
    return (
        e.source,
        e.name,
        e.format,
        e.architecture or "?",
        e.quantization or "?",
        human_size(e.size_bytes),
        fits,
        e.path,
        e.reason or "loadable",
    )
