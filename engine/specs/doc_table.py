"""The stage table of docs/ENGINE.md, made from the stage specs so it cannot drift.

``python -m engine.specs.doc_table`` rewrites the table between its markers in
docs/ENGINE.md; ``tests/engine/stages/test_stage_docs.py`` fails when the file and the specs differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.specs.registry import SPECS

BEGIN = "<!-- stage table: made by `python -m engine.specs.doc_table` from engine/specs/*.py -->"
END = "<!-- end of stage table -->"
ENGINE_MD = Path(__file__).resolve().parents[2] / "docs" / "ENGINE.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe inside a cell would split it


def _flags(name: str) -> str:
    flags = [flag for f in SPECS[name].fields for flag in (f.flags or (f.cli_flag,))]
    return ", ".join(f"`{flag}`" for flag in flags) or "—"


def render() -> str:
    """The table, markers included."""
    rows = [
        "| stage | definition | off | reference | flags | in the default order |",
        "|---|---|---|---|---|---|",
        "| `raw` | the model's logits at the last position (the start, not a stage) | | | | |",
    ]
    for name, spec in SPECS.items():
        if not spec.reorderable:
            default = "first, always"
        elif spec.constraint:
            default = "first, unless `samplers` lists it elsewhere"
        else:
            default = "yes" if spec.default_on else "no: list it in `samplers`"
        cells = (f"`{name}`", spec.definition, spec.off, spec.reference, _flags(name), default)
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join([BEGIN, *rows, END])


def updated(text: str) -> str:
    """``text`` with the table between the markers replaced by :func:`render`'s."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + render() + text[end:]


def main() -> int:
    ENGINE_MD.write_text(updated(ENGINE_MD.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote the stage table of {ENGINE_MD}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
