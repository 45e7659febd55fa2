"""``generate`` and ``score`` under a grammar, as subprocesses on the tiny model: the flags,
the records' ``grammar`` objects, the refusals (usage errors with llguidance's message)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import jsonschema
import pytest

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


def test_each_steps_kept_set_replays_from_the_records_with_llguidance(tiny_folder):
    """What a bug report's records must let a reader redo: from the ``done`` record's grammar
    (kind and text) and the tokens' ids alone, llguidance's own matcher, built here on the
    model's tokenizer, allows exactly what each step kept — the survivors' count, each
    candidate removed by the grammar or not, the kept candidates' logprobs renormalized over
    the mass the grammar left — and says the output complete where the records do."""
    import math

    import llguidance
    import llguidance.hf
    import llguidance.numpy
    import numpy as np
    from transformers import AutoTokenizer

    variants = {
        "regex": {"grammar": ["regex", "[a-z]{2}-[0-9]{1,3}"]},
        "gbnf": {"grammar": ["gbnf", 'root ::= "yes" | "no" | "maybe " [0-9]']},
        "schema": {"grammar": ["json_schema", json.dumps(SCHEMA)], "seed": 9},
    }
    flags = [f for v in variants.values() for f in ("--variant", json.dumps(v))]
    model = ("--model", str(tiny_folder), "--prompt", "answer", "--max-tokens", "60", "--temperature", "0.9")
    out = records(engine("generate", *model, "--seed", "3", "--top-logprobs", "6", *flags))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_folder))
    for request in range(len(variants)):
        tokens = [r for r in out if r["type"] == "token" and r["request"] == request]
        (done,) = [r for r in out if r["type"] == "done" and r["request"] == request]
        vocab = tokens[0]["survivors"]["raw"]
        ll = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=vocab, eos_token=tokenizer.convert_tokens_to_ids("<|im_end|>")
        )
        matcher = llguidance.LLMatcher(ll, llguidance.grammar_from(done["grammar"]["kind"], done["grammar"]["text"]))
        assert not matcher.is_error(), matcher.get_error()
        for token in tokens:
            bits = llguidance.numpy.allocate_token_bitmask(1, vocab)
            llguidance.numpy.fill_next_token_bitmask(matcher, bits, 0)
            allowed = set(np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little")[:vocab]).tolist())
            assert token["survivors"]["grammar"] == token["grammar"]["allowed"] == len(allowed)
            assert token["token_id"] in allowed
            for c in token["top"]:
                assert (c["removed_by"] == "grammar") == (c["token_id"] not in allowed), (token["index"], c)
            # The kept candidates move by one shift, -log of the raw mass the grammar kept (its
            # 5 decimals say little of that mass where nearly all of it was removed).
            shifts = [c["logprobs"]["grammar"] - c["raw_logprob"] for c in token["top"] if c["token_id"] in allowed]
            assert max(shifts) - min(shifts) <= 3e-5
            kept_raw = 1.0 - token["grammar"]["removed_raw"]
            if kept_raw > 0.1:
                assert shifts[0] == pytest.approx(-math.log(kept_raw), abs=5e-4)
            assert matcher.consume_token(token["token_id"])
        assert matcher.is_accepting() == done["grammar"]["complete"] is True
