"""The token codec (engine/api/codec.py): a TokenStep round-trips through every style, the CLI,
the store and an export carry the same record for the same step, the CLI's lines are byte
for byte those of the encoders before it, and every older record still decodes."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store.export import ExportBranch, ExportData, ExportMessage, from_records, records
from app.store.serialize import steps_from_json, steps_to_json
from engine.api.codec import (
    CLI,
    CODEC_VERSION,
    EXPORT,
    STORE,
    CodecError,
    decode_step,
    divergence_record,
    done_record,
    encode_step,
    score_done_record,
    token_record,
)
from engine.api.events import Candidate, FinishReason, TokenStep
from engine.api.params import SamplingParams
from tests.support.chain_steps import chain_step
from tests.support.codec_steps import cli_lines, remote_step, to_cli
from tests.support.paths import DATA

DERIVED = {"logprob", "raw_logprob", "entropy_raw", "entropy"}
FULL = {"position", "piece", "logprobs"}


def comparable(value: Any) -> Any:
    """A step (or part of one) with NaN made comparable: NaN != NaN, "nan" == "nan"."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, (tuple, list)):
        return tuple(comparable(v) for v in value)
    if isinstance(value, (TokenStep, Candidate)):
        return tuple((name, comparable(getattr(value, name))) for name in value.__slots__)
    return value


def through_json(record: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(record, allow_nan=False))  # strict JSON: no NaN, no Infinity


# Round trips -----------------------------------------------------------------------------------

STAGES = ["bias", "penalties", "dry", "temperature", "top_k", "top_p", "min_p", "xtc"]
PARAMS = [SamplingParams(), SamplingParams(temperature=0.7, top_k=5, seed=2), SamplingParams(min_p=0.1, seed=9)]
logprob = st.one_of(st.floats(-50, 0), st.just(-math.inf))
value = st.one_of(st.floats(-1e6, 1e6), st.none())  # None: not reported
count = st.one_of(st.integers(0, 10**6), st.none())


@st.composite
def token_steps(draw: st.DrawFn) -> TokenStep:
    """A local step (raw logits and the raw entropy always known, as the engine computes
    them) or a server's (one stage, ``reported_stage``, the rest None): a record without
    ``reported_stage`` is told apart by that (``engine.api.codec._reported_stage``)."""
    reported = draw(st.booleans())
    chain = (
        (draw(st.sampled_from(["raw", *STAGES])),)
        if reported
        else ("raw", *draw(st.lists(st.sampled_from(STAGES), unique=True, max_size=4)))
    )
    n = len(chain)

    def per_stage(values: st.SearchStrategy) -> tuple:
        return tuple(draw(st.lists(values, min_size=n, max_size=n)))

    # A server may send a token's text without its id (None: not reported).
    token_id = st.one_of(st.none(), st.integers(0, 1 << 20)) if reported else st.integers(0, 1 << 20)

    def candidate() -> Candidate:
        if reported:
            return Candidate(
                draw(token_id),
                draw(st.text(max_size=4)),
                None,
                (draw(st.floats(-50, 0)),),
                None,
                None,
                None,
                None,
            )
        return Candidate(
            draw(st.integers(0, 1 << 20)),
            draw(st.text(max_size=4)),
            draw(st.floats(-1e6, 1e6)),
            per_stage(logprob),
            draw(st.one_of(st.none(), st.sampled_from(chain[1:] or ("raw",)))),
            draw(value),
            draw(value),
            draw(count),
            draw(value) if "dry" in chain else None,  # DRY's change: only where it ran
        )

    top = tuple(candidate() for _ in range(draw(st.integers(0, 4))))
    if reported:
        logprobs, entropies, survivors = (draw(st.one_of(st.none(), st.floats(-50, 0))),), (None,), (None,)
    else:
        logprobs, entropies, survivors = (
            per_stage(logprob),
            (draw(st.floats(0, 12)), *per_stage(value)[1:]),
            per_stage(count),
        )
    return TokenStep(
        request_id=-1,
        index=draw(st.integers(0, 10**5)),
        position=None if reported else draw(st.one_of(st.none(), st.integers(0, 10**5))),
        token_id=draw(token_id),
        text=draw(st.text(max_size=6)),
        piece=draw(st.text(max_size=6)),
        chain=chain,
        logprobs=logprobs,
        entropies=entropies,
        survivors=survivors,
        top=top,
        params=draw(st.sampled_from(PARAMS)),
        forced=draw(st.booleans()),
        rank=draw(st.one_of(st.none(), st.integers(1, 10**5))),
        reported_stage=chain[0] if reported else None,
    )


@settings(max_examples=150, deadline=None)
@given(token_steps())
def test_a_step_round_trips_through_the_store_style_exactly(step):
    record = through_json(encode_step(step, STORE, step.params.to_dict()))
    assert record["v"] == CODEC_VERSION
    assert comparable(decode_step(record)) == comparable(step)


@settings(max_examples=150, deadline=None)
@given(token_steps())
def test_a_step_round_trips_through_the_export_style_exactly(step):
    """An export keeps every number as the float it is (a KL divergence of 1e-7 between two
    precisions of one model was written as 0 at 5 decimals)."""
    record = through_json(encode_step(step, EXPORT))
    assert comparable(decode_step(record, step.params)) == comparable(step)


def test_a_cli_record_decodes_to_what_it_holds():
    """A plain ``python -m engine generate`` line: the chosen token's per-stage logprobs
    come from its candidate; what the CLI does not print takes its neutral value."""
    step = chain_step(index=2)
    back = decode_step(through_json(token_record(step, 0)), step.params)
    assert back.chain == step.chain and back.token_id == step.token_id and back.index == 2
    assert back.logprobs == pytest.approx(step.logprobs, abs=1e-5)
    assert back.position == back.index and back.piece == step.text
    assert all((c.bias, c.penalty, c.count) == (0.0, 0.0, 0) for c in back.top)
    chosen = next(c for c in step.top if c.token_id == step.token_id)
    lonely = through_json(token_record(replace(step, top=tuple(c for c in step.top if c is not chosen)), 0))
    with pytest.raises(CodecError, match="not a candidate"):
        decode_step(lonely, step.params)


# One record for the CLI, the store and an export -----------------------------------------------


def export_of(step: TokenStep) -> ExportData:
    branch = ExportBranch("m", step.params, FinishReason.STOP, step.text, [step])
    user = ExportMessage("user", "hi")
    return ExportData("reply", {"name": "m"}, messages=[user, ExportMessage("assistant", "", (0, -1), 0, [branch])])


@pytest.mark.parametrize("step", [chain_step(index=2), replace(chain_step(), rank=2, forced=True), remote_step()])
def test_the_cli_the_store_and_the_export_carry_the_same_record(step):
    cli = token_record(step, 0)
    (stored,) = json.loads(steps_to_json([step]))
    (exported,) = [r for r in records(export_of(step)) if r["type"] == "token"]
    # The export's record is the CLI's (same keys, the same values at the CLI's 5 decimals: the
    # export keeps them whole) plus what rebuilds the step.
    assert {k: to_cli(exported[k]) for k in cli if k != "top"} == {k: v for k, v in cli.items() if k != "top"}
    assert [{k: to_cli(c[k]) for k in cli["top"][0]} for c in exported["top"]] == cli["top"]
    reported = {"reported_stage"} if step.reported_stage is not None else set()  # not in the CLI's bytes
    assert set(exported) - set(cli) == FULL | reported | {"message", "branch"}  # params: the branch's, unchanged
    dry = {"dry"} if "dry" in step.chain else set()  # DRY's change of a logit, where it ran
    assert all(set(c) - set(cli["top"][0]) == {"bias", "penalty", "count"} | dry for c in exported["top"])
    # The store's is the export's, unrounded, with its version and without what it derives.
    assert set(stored) == set(exported) - DERIVED - {"type", "request", "message", "branch"} | {"v", "params"}
    assert {k: v for k, v in through_json(encode_step(step, EXPORT)).items()} == {
        k: exported[k] for k in exported if k not in {"type", "request", "message", "branch", "params"}
    }
    for key in stored.keys() - {"v", "params", "top", "logprobs", "entropies"}:
        assert stored[key] == exported[key], key
    # ... and all three read back to the same step.
    (from_store,) = steps_from_json(steps_to_json([step]))
    (from_export,) = from_records(records(export_of(step))).messages[1].branches[0].steps
    from_cli = decode_step(cli, step.params)
    assert comparable(from_store) == comparable(replace(step, request_id=-1))
    for other in (from_export, from_cli):
        assert other.chain == from_store.chain and other.token_id == from_store.token_id
        assert comparable(other.survivors) == comparable(from_store.survivors)
        assert [c.token_id for c in other.top] == [c.token_id for c in from_store.top]
        for a, b in zip(other.logprobs, from_store.logprobs, strict=True):
            assert (a == b == -math.inf) or a == pytest.approx(b, abs=1e-5)
    assert comparable(from_export) == comparable(decode_step(through_json(encode_step(step, EXPORT)), step.params))


# Older records ---------------------------------------------------------------------------------


def with_phase(line: str) -> str:
    """A token line of 7900ff8 as it is since issue 26: ``"phase": null`` after ``forced``
    (the one key added; every other byte stays)."""
    record = json.loads(line)
    if record.get("type") != "token":
        return line
    out = {}
    for key, value in record.items():
        out[key] = value
        if key == "forced":
            out["phase"] = None
    return json.dumps(out)


def test_cli_lines_are_byte_for_byte_those_before_the_codec():
    """tests/data/cli_records_7900ff8.jsonl: the records commit 7900ff8's encoders printed,
    with the token records' ``phase`` (issue 26)."""
    expected = [with_phase(line) for line in (DATA / "cli_records_7900ff8.jsonl").read_text().splitlines()]
    lines = []
    for kind, v in cli_lines():
        if kind in ("token", "scored"):
            lines.append(json.dumps(token_record(*v)))
        elif kind == "done":
            lines.append(json.dumps(done_record(*v)))
        elif kind == "score_done":
            lines.append(json.dumps(score_done_record(v)))
        else:
            lines.append(json.dumps(divergence_record(v, {4: 0, 6: 1})))
    assert lines == expected


def test_an_old_export_decodes_to_the_same_steps():
    """Export records written before the codec (counts of -1 written as -1) read back as
    the steps they were written from, to their 5 decimals: -1 and NaN as None, and the
    remote step (no ``reported_stage`` key then) recognised as a server's."""
    steps = [chain_step(index=2), replace(chain_step(index=3, chosen=2), forced=True, rank=4), remote_step()]
    lines = (DATA / "export_records_7900ff8.jsonl").read_text().splitlines()
    for step, line in zip(steps, lines, strict=True):
        back = decode_step(json.loads(line), step.params)
        written = encode_step(step, replace(EXPORT, digits=5))  # exports were rounded to 5 decimals then
        assert comparable(back) == comparable(decode_step(through_json(written), step.params))
        assert back.rank == step.rank and back.forced == step.forced and back.position == step.position


def test_a_version_2_store_record_decodes_to_the_same_steps():
    """The store's records before the codec: version 2, NaN written as NaN, counts as -1;
    both read back as None ("not reported"), the remote step with its reported stage."""
    text = (DATA / "store_steps_v2.json").read_text()
    assert all(r["v"] == 2 for r in json.loads(text)) and "NaN" in text and '"count": -1' in text
    steps = [chain_step(index=2), replace(chain_step(index=3, chosen=2), forced=True), remote_step()]
    decoded = steps_from_json(text)
    for step, back in zip(steps, decoded, strict=True):
        assert comparable(back) == comparable(replace(step, request_id=-1))  # version 2 kept no rank
    remote = decoded[-1]
    assert remote.reported_stage == "final" and remote.entropies == (None,) and remote.survivors == (None,)
    assert all(c.raw_logit is None and c.count is None and c.bias is None for c in remote.top)
    assert all(s.reported_stage is None for s in decoded[:-1])


def without_ids(step: TokenStep) -> TokenStep:
    """``step`` as a server that sends no token ids reports it."""
    return replace(step, token_id=None, top=tuple(replace(c, token_id=None) for c in step.top))


def with_minus_one(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the codec wrote an unreported token id before version 4: -1."""
    out = {**record, "token_id": -1, "top": [{**c, "token_id": -1} for c in record["top"]]}
    if "v" in out:
        out["v"] = 3
    return out


def test_an_unreported_token_id_is_null_in_every_record_and_none_again():
    step = without_ids(remote_step())
    for style in (CLI, EXPORT, STORE):
        record = through_json(encode_step(step, style, step.params.to_dict()))
        assert record["token_id"] is None and [c["token_id"] for c in record["top"]] == [None, None]
        back = decode_step(record, step.params)
        assert back.token_id is None and [c.token_id for c in back.top] == [None, None]
        assert back.logprobs == step.logprobs  # the CLI's record: the chosen candidate found by text
    assert encode_step(step, STORE, step.params.to_dict())["v"] == CODEC_VERSION == 4


@pytest.mark.parametrize("style", [CLI, EXPORT, STORE])
def test_an_older_record_with_a_token_id_of_minus_one_reads_it_as_none(style):
    """Version 3 store records, exports and CLI lines wrote -1 for a token id a server did
    not report (vLLM, SGLang, Ollama): it reads back as None, the step's and its candidates'."""
    step = without_ids(remote_step())
    old = with_minus_one(through_json(encode_step(step, style, step.params.to_dict())))
    back = decode_step(old, step.params)
    assert back.token_id is None and [c.token_id for c in back.top] == [None, None]
    assert comparable(back) == comparable(decode_step(through_json(encode_step(step, style)), step.params))


def test_an_old_store_record_of_a_server_without_ids_reads_back_with_none():
    """The version-2 fixture's server step, as such a server reported it (ids -1 in the
    store's JSON), and a version-3 array of the same: both read back with None."""
    v2 = json.loads((DATA / "store_steps_v2.json").read_text())
    remote = {**v2[-1], "token_id": -1, "top": [{**c, "token_id": -1} for c in v2[-1]["top"]]}
    step = without_ids(remote_step())
    v3 = with_minus_one(json.loads(steps_to_json([step]))[0])
    assert remote["v"] == 2 and v3["v"] == 3
    for back in steps_from_json(json.dumps([remote, v3])):
        assert back.token_id is None and [c.token_id for c in back.top] == [None, None]
        assert back.reported_stage == "final" and back.logprobs == (-0.25,)


def test_an_old_database_with_unreported_ids_of_minus_one_opens_with_none(tmp_path):
    """A database an older app wrote for a server without ids (version-3 records, -1 for
    the ids) opens, and its steps have None; no column of the schema holds a token id."""
    from app.store.store import Store

    step = without_ids(remote_step())
    store = Store(tmp_path / "old.sqlite3")
    conv = store.writes.new_conversation("", "old")
    user = store.writes.add_user_message(conv.id, "hi", None)
    reply = store.writes.add_assistant_message(conv.id, user.id)
    branch = store.writes.add_branch(reply.id, [step], step.text, "length", "m", step.params)
    old = json.dumps([with_minus_one(r) for r in json.loads(steps_to_json([step]))])
    store.writes.set_branch_steps(branch.id, old)
    store.close()
    db = sqlite3.connect(str(tmp_path / "old.sqlite3"))
    (text,) = db.execute("SELECT steps FROM branches WHERE id = ?", (branch.id,)).fetchone()
    columns = [row[1] for table in ("branches", "live_steps") for row in db.execute(f"PRAGMA table_info({table})")]
    db.close()
    assert '"token_id": -1' in text and '"v": 3' in text and not any("token" in c for c in columns)
    store = Store(tmp_path / "old.sqlite3")
    (back,) = store.reads.thread(conv.id)[-1].branch.steps
    store.close()
    assert back.token_id is None and [c.token_id for c in back.top] == [None, None]


def test_a_newer_record_is_refused():
    record = encode_step(chain_step(), STORE, SamplingParams().to_dict())
    record["v"] = CODEC_VERSION + 1
    with pytest.raises(CodecError, match=f"format {CODEC_VERSION + 1} is newer"):
        decode_step(record)


def test_the_cli_style_writes_no_app_fields():
    record = encode_step(chain_step(), CLI)
    assert not (set(record) & (FULL | {"v", "params"}))
    assert not (set(record["top"][0]) & {"bias", "penalty", "count"})


# Finish reasons ----------------------------------------------------------------------------------


def test_finish_reasons_are_their_strings_everywhere(tmp_path):
    assert [r.value for r in FinishReason] == ["stop", "length", "cancelled", "error", "scored", "interrupted"]
    assert FinishReason.LENGTH == "length" and f"[{FinishReason.LENGTH}]" == "[length]"
    assert json.dumps({"r": FinishReason.CANCELLED}) == '{"r": "cancelled"}'
    db = sqlite3.connect(str(tmp_path / "r.sqlite3"))
    db.execute("CREATE TABLE t (r TEXT)")
    db.execute("INSERT INTO t VALUES (?)", (FinishReason.ERROR,))
    assert db.execute("SELECT r, typeof(r) FROM t").fetchone() == ("error", "text")
    db.close()
    assert FinishReason("interrupted") is FinishReason.INTERRUPTED


def test_the_codec_loads_no_mlx():
    """The app reads and writes records with it, and the app must not load MLX."""
    code = (
        "import sys, engine.api.codec, app.store.serialize, app.store.export;"
        "print([m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm', 'PySide6')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
