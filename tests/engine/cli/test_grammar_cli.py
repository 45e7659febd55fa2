"""``generate`` and ``score`` under a grammar, as subprocesses on the tiny model: the flags,
the records' ``grammar`` objects, the refusals (usage errors with llguidance's message)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import jsonschema

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}},
    "required": ["n", "ok"],
    "additionalProperties": False,
    "x-guidance": {"whitespace_flexible": False},
}


def engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=600)


def records(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_generate_under_a_schema_file_a_regex_and_a_gbnf_grammar(tiny_folder, tmp_path):
    """One run: the schema from a file for the flags' settings, and a variant for each other
    kind (the inline schema, a regex, a GBNF grammar) and one without a grammar."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    gbnf = 'root ::= "yes" | "no" | "maybe " [0-9]'
    variants = {
        "schema": {},
        "inline": {"grammar": ["json_schema", json.dumps(SCHEMA)], "seed": 4},
        "regex": {"grammar": ["regex", "[a-z]{2}-[0-9]"]},
        "gbnf": {"grammar": ["gbnf", gbnf]},
        "none": {"grammar": [], "max_tokens": 8},
    }
    flags = [f for v in variants.values() for f in ("--variant", json.dumps(v))]
    model = ("--model", str(tiny_folder), "--prompt", "answer", "--max-tokens", "60", "--temperature", "0.9")
    out = records(engine("generate", *model, "--json-schema", str(schema), "--seed", "3", *flags))
    for request, name in enumerate(variants):
        tokens = [r for r in out if r["type"] == "token" and r["request"] == request]
        (done,) = [r for r in out if r["type"] == "done" and r["request"] == request]
        if name == "none":
            assert all("grammar" not in t for t in tokens) and "grammar" not in done
            continue
        assert all(set(t["grammar"]) >= {"allowed", "removed", "removed_raw", "forced", "wanted"} for t in tokens)
        assert all("grammar" in t["chain"] and t["chain"][1] == "grammar" for t in tokens)
        assert done["finish_reason"] == "stop" and done["grammar"]["complete"], (name, done)
        assert done["grammar"]["tokens"] == len(tokens) and done["grammar"]["left_at"] is None
        text = "".join(t["text"] for t in tokens)
        if name in ("schema", "inline"):
            jsonschema.validate(json.loads(text), SCHEMA)
        elif name == "regex":
            assert re.fullmatch("[a-z]{2}-[0-9]", text)
        else:
            assert re.fullmatch("yes|no|maybe [0-9]", text)


def test_score_says_where_a_text_leaves_its_grammar(tiny_folder):
    out = records(engine("score", "--model", str(tiny_folder), "--text", "123abc", "--regex", "[0-9]+"))
    tokens = [r for r in out if r["type"] == "token"]
    (done,) = [r for r in out if r["type"] == "score_done"]
    left = done["grammar"]["left_at"]
    assert left is not None and tokens[left]["grammar"]["left"] and not tokens[left - 1]["grammar"]["left"]
    assert "a" in tokens[left]["text"] and not any("a" in t["text"] for t in tokens[:left])
    assert tokens[left]["logprob"] is None  # removed by the grammar: -inf, written null


def test_refusals_are_usage_errors_with_the_librarys_message(tiny_folder, tmp_path):
    model = ("--model", str(tiny_folder), "--prompt", "x")
    (tmp_path / "bad.txt").write_text("start: x")
    cases = [
        (("--regex", "a(b"), "unclosed group"),
        (("--json-schema", '{"type": "integer", "minimum": "x"}'), "cannot be compiled"),
        (("--json-schema", str(tmp_path / "missing.json")), "cannot read"),
        (("--grammar", str(tmp_path / "bad.txt")), "takes a .lark or a .gbnf file"),
        (("--regex", "[0-9]", "--json-object"), "not allowed with argument"),
    ]
    for flags, words in cases:
        proc = engine("generate", *model, *flags)
        assert proc.returncode == 2 and proc.stdout == "", (flags, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, (flags, proc.stderr)
