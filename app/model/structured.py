"""Structured output from the app's side (Qt-free): the grammar a reply is written under, what
the grammar did at each token, and how a reply ended under it.

The engine's ``grammar`` stage (``engine.specs.grammar``) keeps only the tokens a JSON schema,
a regex or a Lark / GBNF grammar allows, and each token records what it did
(``engine.api.grammar.GrammarRecord``). This module gives the Sampling dock's *Structured
output* section its choices, presets and files, and the views their words (the timeline's row
is ``app.model.grammar_masks``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from engine.api.events import TokenStep
from engine.api.grammar import GrammarRecord, GrammarStats
from engine.specs.grammar import KIND_WORDS

KIND_CHOICES: tuple[tuple[str, str], ...] = (
    ("None", ""),
    ("Any JSON object", "json"),
    ("JSON schema", "json_schema"),
    ("Regex", "regex"),
    ("Lark grammar", "lark"),
    ("GBNF grammar (llama.cpp)", "gbnf"),
)
"""The section's choices: (label, ``grammar`` kind; "" = none)."""

PLACEHOLDERS = {
    "json_schema": '{"type": "object", "properties": {...}, "required": [...]}',
    "regex": "[0-9]{4}-[0-9]{2}-[0-9]{2}",
    "lark": 'start: item ("," item)*\nitem: /[a-z]+/',
    "gbnf": 'root ::= "yes" | "no"',
}

_PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
_SENTIMENT = {
    "type": "object",
    "properties": {
        "sentiment": {"enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["sentiment", "confidence"],
    "additionalProperties": False,
}
GRAMMAR_PRESETS: dict[str, tuple[str, str]] = {
    "Person (JSON schema)": ("json_schema", json.dumps(_PERSON, indent=2)),
    "Sentiment (JSON schema)": ("json_schema", json.dumps(_SENTIMENT, indent=2)),
    "Yes or no (regex)": ("regex", "(yes|no)"),
    "ISO date (regex)": ("regex", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    "Sum of numbers (Lark)": ("lark", 'start: NUMBER (" + " NUMBER)* " = " NUMBER\nNUMBER: /[0-9]+/'),
    "Bullet list (GBNF)": ("gbnf", 'root ::= item item? item?\nitem ::= "- " [a-zA-Z ,]+ "\\n"'),
}
"""A few grammars to start from, one per kind (the section's Presets menu)."""

FILE_KINDS = {".json": "json_schema", ".lark": "lark", ".gbnf": "gbnf", ".regex": "regex", ".txt": "regex"}
FILE_FILTER = "Grammars (*.json *.lark *.gbnf *.regex *.txt);;All files (*)"
MAX_FILE_BYTES = 1_000_000


def read_grammar_file(path: str | Path, kind: str = "") -> tuple[str, str]:
    """(kind, text) of a grammar file: the kind from its suffix (``.json``: a schema, ``.lark``,
    ``.gbnf``, ``.regex`` / ``.txt``: a regex), else ``kind`` (the one chosen). Raises
    ``ValueError`` with words for the person: unreadable, too large, not text."""
    path = Path(path)
    found = FILE_KINDS.get(path.suffix.lower(), kind)
    if not found or found == "json":
        raise ValueError(f"“{path.name}”: choose a grammar kind first, or open a .json, .lark, .gbnf or .regex file.")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"“{path.name}” is over {MAX_FILE_BYTES // 1_000_000} MB: not a grammar.")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"“{path.name}” is not UTF-8 text.") from None
    except OSError as exc:
        raise ValueError(f"“{path.name}” cannot be read: {exc.strerror or exc}.") from None
    if found == "regex":
        text = text.strip("\n")  # a regex file's final newline is not part of it
    return found, text


# Words ------------------------------------------------------------------------------------------


def _percent(value: float) -> str:
    if value >= 0.9995 and value < 1.0:
        return ">99.9%"
    if 0.0 < value < 0.0005:
        return "<0.1%"
    return f"{100 * value:.1f}%"


def record_words(record: GrammarRecord, wanted_text: str | None = None) -> str:
    """A token's grammar record in a line (tooltips, the inspector)."""
    if record.left:
        return "grammar: left at or before this token (a forced token it forbids); it keeps every token since"
    parts = [f"grammar: {record.allowed:,} token{'s' if record.allowed != 1 else ''} allowed"]
    if record.forced:
        parts[0] += " (forced)"
    parts.append(f"removed {_percent(record.removed)} of the distribution entering it")
    if abs(record.removed_raw - record.removed) > 5e-4:
        parts.append(f"{_percent(record.removed_raw)} of raw")
    if record.wanted is not None:
        parts.append(f"overrode the model's first choice “{wanted_text}”" if wanted_text else "overrode the model")
    if record.accepting:
        parts.append("complete here")
    return " · ".join(parts)


def header_line(record: GrammarRecord) -> str:
    """The chain view's grammar column: the mass it removed, in a few characters."""
    if record.left:
        return "left"
    return "forced" if record.forced else f"−{_percent(record.removed)}"


def wanted_text(step: TokenStep) -> str | None:
    """The text of the model's first choice the grammar removed (from the candidates)."""
    record = step.grammar
    if record is None or record.wanted is None:
        return None
    return next((c.text for c in step.top if c.token_id == record.wanted), None)


def heading_note(steps: Sequence[TokenStep]) -> str:
    """A reply's heading note under a grammar: "[JSON schema: complete]", "…: not complete]"
    (cut before its end), "[left the regex]" ("" without one)."""
    last = next((s for s in reversed(steps) if s.grammar is not None), None)
    if last is None:
        return ""
    what = KIND_WORDS.get(last.params.grammar[0], "grammar") if last.params.grammar else "grammar"
    if any(s.grammar is not None and s.grammar.left for s in steps):
        return f"[left the {what}]"
    return f"[{what}: {'complete' if last.grammar.accepting else 'not complete'}]"


def finished_words(stats: GrammarStats) -> str:
    """The status bar's words for a reply that ended under a grammar."""
    if stats.left_at is not None:
        return f"The reply left its grammar at token {stats.left_at + 1} (a forced token it forbids)."
    verdict = (
        "complete: the grammar ended it" if stats.complete else "not complete: it was cut before the grammar's end"
    )
    return (
        f"Under its grammar the reply is {verdict} · {stats.overrides} override"
        f"{'s' if stats.overrides != 1 else ''} of the model's first choice, {stats.forced} forced."
    )
