"""The current figures, one table per kind of machine, made from the bench's own JSON.

``docs/BENCHMARKS.md`` opens on this table between its two markers; ``python -m bench.current``
writes it there again, and ``tests/bench/test_current_table.py`` fails when the page and the
JSON disagree. For each kind of machine the runs are listed newest first: a figure comes from
the newest run that measured it, with that run's commit and date (the commit that recorded its
JSON). A new run is one line in ``SOURCES``; the dated write-ups stay in
``docs/BENCHMARKS-HISTORY.md``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.table import table

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "BENCHMARKS.md"
BEGIN = "<!-- current figures: written by python -m bench.current from the JSON it names -->"
END = "<!-- end of the current figures -->"
NOT_FIGURES = {"machine", "seconds", "smoke", "note", "commit", "commits", "date", "device"}

SOURCES: dict[str, list[tuple[str, str, str]]] = {
    "CPU (this machine: Linux x86-64, 2 cores, MLX's CPU backend)": [
        ("docs/bench-2026-12-07-c.json", "c282097", "2026-12-07"),
        ("docs/bench-2026-12-07-b.json", "85136b7", "2026-12-07"),
        ("docs/bench-2026-12-07.json", "4a5b504", "2026-12-07"),
        ("docs/bench-2026-11-28-b.json#0d603d3", "0d603d3", "2026-11-28"),
        ("docs/bench-2026-11-28.json", "6eb487c", "2026-11-28"),
        ("docs/bench-2026-11-27-h.json", "7ba0c39", "2026-11-27"),
        ("docs/bench-quiet-2026-11-25-b.json", "d7827c2", "2026-11-25"),
        ("docs/bench-session-contended.json", "0c6f567", "2026-11-22"),
        ("docs/bench-quiet-2026-11-22.json", "dbc7f0a", "2026-11-22"),
        ("docs/bench-latest.json", "1c5947b", "2026-11-22"),
    ],
    "GPU (NVIDIA H100, MLX's CUDA backend)": [
        ("docs/bench-gpu-2026-11-27.json", "00315c3", "2026-11-27"),
        ("docs/bench-gpu-2026-11-25.json", "7c2a71d", "2026-11-25"),
    ],
}
"""Per kind of machine: (the run's JSON, the commit that recorded it, its date), newest first;
``FILE#KEY``: the run under ``KEY`` of a file that holds several (each at its commit)."""


def render(root: Path = ROOT) -> str:
    """The tables, as the page holds them between its markers."""
    parts: list[str] = []
    for kind, runs in SOURCES.items():
        parts.append(f"### {kind}\n")
        shown: set[str] = set()
        for path, commit, date in runs:
            file, _, key = path.partition("#")
            results = json.loads((root / file).read_text(encoding="utf-8"))
            results = results[key] if key else results
            rows, older = [], []
            for name, value in results.items():
                if name in NOT_FIGURES or name in shown:
                    continue
                try:
                    lines = table({name: value}).splitlines()[2:]
                except (KeyError, TypeError, ValueError, AttributeError):
                    older.append(name)  # written by an older bench, in a shape table() no longer reads
                    continue
                if lines:
                    rows += lines
                    shown.add(name)
            if not rows:
                continue
            where = Path(file).name + (f"`, run `{key}" if key else "")
            parts.append(f"From [`{where}`]({Path(file).name}), commit {commit}, {date}:\n")
            parts.append("\n".join(["figure | ours | mlx-lm | ratio (goal)", "--- | --- | --- | ---", *rows]) + "\n")
            if older:
                parts.append(f"Also in that file, in an older shape: {', '.join(older)}.\n")
    return "\n".join(parts)


def page_block(text: str) -> str:
    """What ``docs/BENCHMARKS.md`` holds between its markers."""
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n") + "\n"


def main() -> int:
    text = PAGE.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    PAGE.write_text(text[:start] + "\n" + render() + "\n" + text[end:], encoding="utf-8")
    print(f"wrote the current figures into {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
