"""Exports (JSON Lines, CSV) from a database the app's store wrote with real engine steps,
back in (round trip), ``python -m app export``, and replay of a reply under its own
settings (every recorded per-stage logprob within 1e-5, penalties and DRY included)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from app.store.compare_runs import CompareColumn, DivergenceSeries
from app.store.export import from_records, read_jsonl, records, write
from app.store.export_csv import CSV_COLUMNS
from app.store.export_store import from_store, reply_only, to_store
from app.store.store import Store
from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from tests.support.codec_steps import to_cli

PARAMS = SamplingParams(
    max_tokens=24,
    temperature=0.9,
    seed=5,
    top_k=30,
    top_p=0.95,
    repetition_penalty=1.3,
    presence_penalty=0.2,
    frequency_penalty=0.1,
    penalty_window=8,
    dry_multiplier=1.0,
    dry_allowed_length=1,
    top_logprobs=5,
)
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, top_logprobs=4)


@pytest.fixture(scope="module")
def session(tiny_folder):
    from engine.session.session import EngineSession

    s = EngineSession(prefill_chunk=16)
    s.load(str(tiny_folder))
    return s


def generate(session, messages, params) -> tuple[list[TokenStep], Finished]:
    started = session.start(messages, params)
    steps, done = [], None
    while done is None:
        for event in session.step():
            if getattr(event, "request_id", None) != started.request_id:
                continue
            if isinstance(event, TokenStep):
                steps.append(event)
            elif isinstance(event, Finished):
                done = event
    return steps, done


@pytest.fixture(scope="module")
def db(session, tmp_path_factory):
    """A conversation as the app saves it: a reply, a regenerated branch, a follow-up turn
    answering the first branch, and a compare run."""
    path = tmp_path_factory.mktemp("db") / "db.sqlite3"
    store = Store(path)
    store.note_model("tiny", "/models/tiny", "float32", "local")  # as the app does when the model loads
    conv = store.writes.new_conversation("You are terse.", "the test")
    user = store.writes.add_user_message(conv.id, "the hat", None)
    reply = store.writes.add_assistant_message(conv.id, user.id)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "the hat"}]
    steps, done = generate(session, messages, PARAMS)
    first = store.writes.add_branch(reply.id, steps, done.text, done.finish_reason, "tiny", PARAMS)
    steps2, done2 = generate(session, messages, GREEDY)
    store.writes.add_branch(reply.id, steps2, done2.text, done2.finish_reason, "tiny", GREEDY)
    store.writes.set_active_branch(reply.id, first.id)
    user2 = store.writes.add_user_message(conv.id, "in the tin", first.id)
    reply2 = store.writes.add_assistant_message(conv.id, user2.id)
    columns = []
    for label, params in (("a", GREEDY), ("b", PARAMS)):
        s, d = generate(session, messages, params)
        columns.append((CompareColumn(label, params, ("reply", 0)), s, d.text, d.finish_reason))
    series = DivergenceSeries(2)
    store.note_model("tiny", "/models/tiny-q8", "float16", "local")  # another file, the same name, loaded later
    store.writes.add_compare_run(reply2.id, columns, "tiny", 0, series)
    store.close()
    return path, conv.id


def test_round_trip(db, tmp_path):
    path, cid = db
    store = Store(path)
    data = from_store(store, cid, "tiny-source")
    first = records(data, created="T")
    # the source the replies recorded, not the model loaded now
    model = {"name": "tiny", "source": "/models/tiny", "precision": "float32", "backend": "local"}
    assert first[0]["type"] == "header" and first[0]["model"] == model
    sources = [r["model_source"] for r in first if r["type"] == "branch"]
    assert sources == ["/models/tiny", "/models/tiny", "/models/tiny-q8", "/models/tiny-q8"]
    # each reply names the precision it was computed in, not the one loaded last
    assert [r["precision"] for r in first if r["type"] == "branch"] == ["float32", "float32", "float16", "float16"]
    assert [r["backend"] for r in first if r["type"] == "branch"] == ["local"] * 4  # and where (issue 24)
    assert first[0]["chain"][0] == "raw" and first[0]["params"]["dry_multiplier"] == 1.0
    kinds = [r["type"] for r in first]
    assert kinds.count("branch") == 4 and kinds.count("compare_run") == 1 and kinds.count("message") == 4
    write(data, tmp_path / "a.jsonl")
    back = from_records(read_jsonl(tmp_path / "a.jsonl"))
    assert records(back, created="T") == first
    # ... and through another database
    other = Store(tmp_path / "other.sqlite3")
    new_id = to_store(back, other)
    again = from_store(other, new_id, "tiny-source")
    assert records(again, created="T")[1:] == first[1:]
    # the imported conversation opens in the app's model, its first branch active
    thread = other.reads.thread(new_id)
    assert [m.role for m in thread] == ["user", "assistant", "user", "assistant"]
    # values are kept to 5 decimals, as the CLI writes them
    assert thread[1].branch.steps[3].top[0].logprobs == pytest.approx(
        data.messages[1].branches[0].steps[3].top[0].logprobs, abs=1e-5
    )
    # a reply alone
    one = records(reply_only(data, 3, 1))
    branches = [r for r in one if r["type"] == "branch"]  # the branch answered on the way, and the reply
    assert [(b["message"], b["branch"]) for b in branches] == [(1, 0), (3, 0)]
    assert branches[-1]["text"] == data.messages[3].branches[1].text
    store.close()
    other.close()


def test_token_records_are_the_cli_shape(db):
    from engine.api.codec import token_record as token_json

    path, cid = db
    store = Store(path)
    data = from_store(store, cid)
    step = data.messages[1].branches[0].steps[2]
    rec = next(r for r in records(data) if r["type"] == "token" and r["index"] == 2)
    cli = token_json(step, 0)
    for key, value in cli.items():  # the export's numbers whole, the CLI's at 5 decimals
        if key != "top":
            assert to_cli(rec[key]) == value, key
    assert [{k: to_cli(c[k]) for k in cli["top"][0]} for c in rec["top"]] == cli["top"]
    store.close()


def test_csv_loads_in_pandas(db, tmp_path):
    pd = pytest.importorskip("pandas")
    path, cid = db
    store = Store(path)
    data = from_store(store, cid)
    n = write(data, tmp_path / "a.csv")
    df = pd.read_csv(tmp_path / "a.csv")
    assert list(df.columns) == list(CSV_COLUMNS) and len(df) == n
    token_rows = [r for r in records(data) if r["type"] == "token"]
    assert n == sum(len(r["top"]) * len(r["chain"]) for r in token_rows)
    chosen = df[(df.chosen == 1) & (df.stage == "raw")]
    assert len(chosen) == len(token_rows)
    assert set(df.stage) <= set(PARAMS.samplers) | {"raw", "bias"}
    # the logprob of a removed candidate is empty (NaN), and it names its stage
    removed = df[df.removed_by.notna()]
    assert not removed.empty
    store.close()


def test_app_export_command(db, tmp_path):
    path, cid = db
    out = tmp_path / "cli.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "app", "export", "--out", str(out), "--db", str(path), "--conversation", str(cid)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    recs = read_jsonl(out)
    store = Store(path)
    expected = records(from_store(store, cid))
    store.close()
    assert recs[1:] == expected[1:] and recs[0]["kind"] == "conversation"
    assert recs[0]["model"] == {"name": "tiny", "source": "/models/tiny", "precision": "float32", "backend": "local"}
    assert [r["precision"] for r in recs if r["type"] == "branch"] == ["float32", "float32", "float16", "float16"]
    csv_out = tmp_path / "cli.csv"
    run = subprocess.run(
        [sys.executable, "-m", "app", "export", "--out", str(csv_out), "--db", str(path), "--all"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    header = csv_out.read_text().splitlines()[0].split(",")
    assert header == ["conversation", *CSV_COLUMNS]
    bad = subprocess.run(
        [sys.executable, "-m", "app", "export", "--out", str(out), "--db", str(tmp_path / "none.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


def test_replay_under_own_settings(session, db):
    """Every per-stage logprob of every recorded candidate, penalties and DRY included."""
    path, cid = db
    store = Store(path)
    data = from_store(store, cid)
    store.close()
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "the hat"}]
    original = data.messages[1].branches[0]
    assert original.params == PARAMS
    replayed = [
        e for e in session.replay(messages, [s.token_id for s in original.steps], PARAMS) if isinstance(e, TokenStep)
    ]
    assert len(replayed) == len(original.steps)
    worst = 0.0
    for old, new in zip(original.steps, replayed, strict=True):
        assert new.index == old.index and new.token_id == old.token_id and new.chain == old.chain
        by_id = {c.token_id: c for c in new.top}
        for c in old.top:
            got = by_id[c.token_id]
            assert got.removed_by == c.removed_by
            for a, b in zip(c.logprobs, got.logprobs, strict=True):
                if a == -math.inf:
                    assert b == -math.inf
                else:
                    worst = max(worst, abs(a - b))
        for a, b in zip(old.logprobs, new.logprobs, strict=True):
            assert (a == b == -math.inf) or abs(a - b) <= 1e-5
    assert worst <= 1e-5, worst

    from app.model.replay import compare

    same = compare(original.steps, replayed, PARAMS)
    assert same.removed == [] and same.differs == [] and same.first_change is None
    greedy = compare(
        original.steps,
        [e for e in session.replay(messages, [s.token_id for s in original.steps], GREEDY) if isinstance(e, TokenStep)],
        GREEDY,
    )
    assert len(greedy.chosen_prob) == len(original.steps)
    assert greedy.first_change is not None  # greedy would have gone elsewhere somewhere in a sampled reply


def test_header_refuses_other_files(tmp_path):
    from app.store.export import ExportFormatError

    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps({"type": "token"}) + "\n")
    with pytest.raises(ExportFormatError):
        from_records(read_jsonl(p))


def test_an_export_from_before_precision_imports_as_not_recorded(db, tmp_path):
    """An export written before issue 19 has no ``precision`` (nor, before issue 24, a
    ``backend``): it reads and imports as not recorded (null), never as the precision or the
    backend of the model loaded now."""
    path, cid = db
    store = Store(path)
    recs = records(from_store(store, cid), created="T")
    store.close()
    for r in recs:
        r.pop("precision", None)
        r.pop("backend", None)
        if r["type"] == "header":
            r["model"].pop("precision")
            r["model"].pop("backend")
    data = from_records(recs)
    assert all(b.precision is None and b.backend is None for m in data.messages for b in m.branches)
    other = Store(tmp_path / "other.sqlite3")
    # loaded now: must not be stamped on old replies
    other.note_model("tiny", "/models/tiny", "bfloat16", "remote:vllm:final:detected")
    new_id = to_store(data, other)
    branches = [r for r in records(from_store(other, new_id)) if r["type"] == "branch"]
    assert branches and all(r["precision"] is None and r["backend"] is None for r in branches)
    other.close()
