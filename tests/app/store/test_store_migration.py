"""A database written by the release before the stage chain (tests/data/store_v1.sqlite3,
made by tests/data/make_store_v1.py with commit d847c8d's own store) still opens."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest

from app.store.store import SCHEMA_VERSION, Store, backup_path
from engine.api.codec import CODEC_VERSION
from engine.api.params import DEFAULT_SAMPLERS, SamplingParams
from tests.support.paths import DATA

FIXTURE = DATA / "store_v1.sqlite3"


def raw_steps(path: Path) -> dict[int, list[dict]]:
    db = sqlite3.connect(str(path))
    try:
        return {bid: json.loads(text) for bid, text in db.execute("SELECT id, steps FROM branches")}
    finally:
        db.close()


def user_version(path: Path) -> int:
    db = sqlite3.connect(str(path))
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def lp(value):
    return -math.inf if value is None else value


@pytest.fixture
def old_db(tmp_path):
    path = tmp_path / "logitscope.sqlite3"
    shutil.copy(FIXTURE, path)
    return path


def test_fixture_is_in_the_old_format():
    assert user_version(FIXTURE) == 0
    steps = raw_steps(FIXTURE)
    assert all("v" not in s and "penalized_logprob" in s for branch in steps.values() for s in branch)


def test_v1_database_opens_migrated(old_db):
    before = raw_steps(old_db)
    store = Store(old_db)
    assert store.migrated_from == 1
    (conversation,) = store.reads.conversations()
    assert conversation.title == "Capital of France"
    thread = store.reads.thread(conversation.id)
    assert [m.role for m in thread] == ["user", "assistant", "user", "assistant"]
    assert thread[0].content == "What is the capital of France?" and thread[2].content == "And its second city?"
    first, second = thread[1].branches
    assert thread[1].branch is second  # the follow-up answered the second branch
    assert [b.finish_reason for b in (first, second)] == ["length", "stop"]

    # Greedy, no truncation: raw, then the old final as "temperature".
    assert all(s.chain == ("raw", "temperature") for s in first.steps)
    # The regeneration changed parameters after two tokens, then a token was picked by hand.
    assert [s.chain for s in second.steps] == [("raw", "min_p")] * 2 + [("raw", "penalties", "top_p")] * 3
    assert [s.forced for s in second.steps] == [False, False, False, True, False]
    (answer,) = thread[3].branches
    assert all(s.chain == ("raw", "bias", "top_k") for s in answer.steps)

    # Every number is the old one, in its stage; what format 1 never had is NaN or -1.
    for branch in (first, second, answer):
        for step, old in zip(branch.steps, before[branch.id], strict=True):
            three = len(step.chain) == 3
            expect = [old["raw_logprob"], *([old["penalized_logprob"]] if three else []), old["logprob"]]
            assert step.logprobs == tuple(lp(v) for v in expect)
            assert step.entropy_raw == old["entropy_raw"] and step.entropy == old["entropy"]
            assert all(h is None for h in step.entropies[1:-1])  # not known: None, never NaN
            assert set(step.survivors) == {None}
            assert step.params.samplers == DEFAULT_SAMPLERS and step.params.seed == old["params"]["seed"]
            for cand, row in zip(step.top, old["top"], strict=True):
                assert (cand.token_id, cand.text, cand.raw_logit) == tuple(row[:3])
                assert cand.logprobs == tuple(lp(v) for v in [row[3], *([row[4]] if three else []), row[5]])
                assert cand.removed_by == (step.chain[-1] if row[5] is None else None)
                assert (cand.bias, cand.penalty, cand.count) == tuple(row[6:])
    removed = [c for s in second.steps for c in s.top if c.removed_by]
    assert {c.removed_by for c in removed} == {"min_p", "top_p"}
    store.close()

    # The rows are rewritten in the codec's current format, the version is recorded, and the
    # old file is kept.
    assert user_version(old_db) == SCHEMA_VERSION
    assert all(s["v"] == CODEC_VERSION for branch in raw_steps(old_db).values() for s in branch)
    backup = backup_path(old_db, 1)
    assert backup.name == "logitscope.sqlite3.v1.bak"
    assert raw_steps(backup) == before and user_version(backup) == 0

    # Opening again migrates nothing and reads the same steps.
    again = Store(old_db)
    assert again.migrated_from is None
    assert again.reads.thread(conversation.id)[1].branches[1].steps == second.steps
    again.close()


def test_new_database_starts_at_the_current_version(tmp_path):
    path = tmp_path / "new.sqlite3"
    Store(path).close()
    assert user_version(path) == SCHEMA_VERSION
    assert not backup_path(path, 1).exists()


def test_a_database_from_a_newer_app_is_refused(tmp_path):
    path = tmp_path / "future.sqlite3"
    Store(path).close()
    db = sqlite3.connect(str(path))
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(RuntimeError, match="newer Logitscope"):
        Store(path)


def test_a_version_2_database_gains_compare_runs(old_db):
    """Schema 2 (the stage chain) -> 3 (compare runs): the table is added, the rows stay."""
    from app.store.compare_runs import CompareColumn, DivergenceSeries

    Store(old_db).close()  # 1 -> current
    db = sqlite3.connect(str(old_db))
    db.execute("DROP TABLE compare_runs")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    before = raw_steps(old_db)
    store = Store(old_db)
    assert store.migrated_from == 2 and user_version(old_db) == SCHEMA_VERSION
    assert backup_path(old_db, 2).exists() and raw_steps(old_db) == before
    (conversation,) = store.reads.conversations()
    message = store.reads.thread(conversation.id)[-1]
    assert store.reads.compare_runs(conversation.id) == []
    divergence = DivergenceSeries(2)
    divergence.add(0, ((0, 1),), (0.25,), (0,))
    columns = [
        (CompareColumn(label, SamplingParams(temperature=t), ("reply", 0)), message.branch.steps, "text", "stop")
        for label, t in (("cold", 0.2), ("hot", 1.5))
    ]
    run_id, branches = store.writes.add_compare_run(message.id, columns, "m", 0, divergence)
    (run,) = store.reads.compare_runs(conversation.id)
    assert run.id == run_id and run.kept is None and [c.label for c in run.columns] == ["cold", "hot"]
    assert [c.stream for c in run.columns] == [("branch", b.id) for b in branches]
    assert run.divergence.to_dict() == divergence.to_dict()
    assert store.reads.thread(conversation.id)[-1].branch.id == branches[0].id
    store.writes.set_compare_kept(run_id, 1)
    assert store.reads.compare_runs(conversation.id)[0].kept == 1
    store.close()


FIXTURE_V5 = DATA / "store_v5.sqlite3"


def test_a_schema_5_database_gains_precision_and_old_replies_read_as_not_recorded(tmp_path):
    """Schema 5 (written by the release before issue 19, tests/data/make_store_v5.py), with a
    reply left in the stream journal: ``precision`` is added to branches and the journal,
    NULL for everything saved before (the recovered reply too), the copy keeps version 5,
    and replies saved from now on record the precision their model computes in."""
    from app.store.schema import INTERRUPTED

    path = tmp_path / "logitscope.sqlite3"
    shutil.copy(FIXTURE_V5, path)
    assert user_version(path) == 5
    store = Store(path)
    assert store.migrated_from == 5 and user_version(path) == SCHEMA_VERSION
    assert user_version(backup_path(path, 5)) == 5
    (recovered,) = store.writes.recover_interrupted()
    (conversation,) = store.reads.conversations()
    thread = store.reads.thread(conversation.id)
    assert thread[-1].branch.id == recovered and thread[-1].branch.finish_reason == INTERRUPTED
    assert thread[-1].branch.model_source == "default"  # schema 5's own column survives
    branches = [b for m in thread if m.role == "assistant" for b in m.branches]
    assert len(branches) >= 3 and all(b.precision is None for b in branches)
    store.note_model("tiny", "/models/tiny", "float16")
    saved = store.writes.add_branch(thread[-1].id, [], "x", "stop", "tiny", SamplingParams())
    assert saved.precision == "float16" and store.reads.branches(thread[-1].id)[-1].precision == "float16"
    assert store.integrity() == "ok"
    store.close()


FIXTURE_V6 = DATA / "store_v6.sqlite3"


def test_a_schema_6_database_gains_backend_and_old_replies_are_labelled_by_their_steps(tmp_path):
    """Schema 6 (the release before issue 24, tests/data/make_store_v6.py): a local reply, a
    reply of mlx_lm.server and a reply left in the stream journal. ``backend`` is added to
    branches and the journal, NULL for everything saved before (the recovered reply too):
    the views label those by their steps (a server's report one stage), never by the model
    loaded now; replies saved from now on record their backend, the journal's too."""
    from app.model.reply_origin import ReplyOrigin
    from app.store.schema import INTERRUPTED
    from app.store.stream import StreamJournal

    path = tmp_path / "logitscope.sqlite3"
    shutil.copy(FIXTURE_V6, path)
    assert user_version(path) == 6
    store = Store(path)
    assert store.migrated_from == 6 and user_version(path) == SCHEMA_VERSION
    assert user_version(backup_path(path, 6)) == 6
    (recovered,) = store.writes.recover_interrupted()
    (conversation,) = store.reads.conversations()
    thread = store.reads.thread(conversation.id)
    assert thread[-1].branch.id == recovered and thread[-1].branch.finish_reason == INTERRUPTED
    branches = [b for m in thread if m.role == "assistant" for b in m.branches]
    assert all(b.backend is None for b in branches)
    origins = {b.id: ReplyOrigin.of(b.model, b.model_source, b.precision, b.backend, b.steps) for b in branches}
    server = next(b for b in branches if b.model_source == "http://127.0.0.1:8080")
    local = next(b for b in branches if b.precision == "float32")
    assert origins[server.id].remote and origins[server.id].entropy_title() == "entropy: not reported by the server"
    assert origins[server.id].label() == "http://127.0.0.1:8080 @ http://127.0.0.1:8080 · server reports: penalties"
    assert not origins[local.id].remote and origins[local.id].entropy_title() is None
    assert origins[local.id].label() == "SmolLM2-135M-Instruct · float32 · local"
    assert not origins[recovered].remote  # schema 6's precision survives; the backend reads from the steps

    store.note_model("tiny", "/models/tiny", "float16", "local")
    store.note_model("Gemma", "http://gpu:8000", "", "remote:vllm:final:detected")
    saved = store.writes.add_branch(thread[-1].id, [], "x", "stop", "Gemma", SamplingParams())
    assert saved.backend == "remote:vllm:final:detected" == store.reads.branches(thread[-1].id)[-1].backend
    journal = StreamJournal(store.path, sources=store.model_sources, backends=store.model_backends)
    journal.token(7, thread[-1].id, "tiny", SamplingParams(), local.steps[:2])
    assert journal.flush()
    assert store.db.execute("SELECT backend FROM live_replies").fetchall() == [("local",)]
    journal.close()
    assert store.integrity() == "ok"
    store.close()


def test_a_schema_7_database_gains_the_served_list(tmp_path):
    """Schema 7 (today's tables but ``served``, issue 38): the table is added, the
    conversations stay, and a served request is recorded and read back, newest first; a
    conversation deleted takes its served row with it."""
    path = tmp_path / "logitscope.sqlite3"
    store = Store(path)
    conversation = store.writes.new_conversation("sys", "kept")
    user = store.writes.add_user_message(conversation.id, "hi", None)
    store.writes.add_assistant_message(conversation.id, user.id)
    store.db.execute("DROP TABLE served")
    store.db.execute("PRAGMA user_version = 7")
    store.db.commit()
    store.close()
    store = Store(path)
    assert store.migrated_from == 7 and user_version(path) == SCHEMA_VERSION
    assert [c.title for c in store.reads.conversations()] == ["kept"]
    assert store.served.recent() == []
    served = store.writes.new_conversation("", "served")
    asked = store.writes.add_user_message(served.id, "q", None)
    reply = store.writes.add_assistant_message(served.id, asked.id)
    first = store.served.add(served.id, reply.id, "127.0.0.1 · curl/8", "chat", "tiny", {"top_k": 20})
    second = store.served.add(served.id, reply.id, "127.0.0.1", "completion", "tiny", {})
    store.served.finish(first.id, "length", 12)
    rows = store.served.recent()
    assert [r.id for r in rows] == [second.id, first.id]
    assert (rows[1].finish_reason, rows[1].tokens, rows[1].sent, rows[1].client) == (
        "length",
        12,
        {"top_k": 20},
        "127.0.0.1 · curl/8",
    )
    assert rows[0].finish_reason is None  # still being written, or interrupted
    store.writes.delete_conversation(served.id)
    assert store.served.recent() == []
    store.close()


FIXTURE_V8 = DATA / "store_v8.sqlite3"


def test_a_schema_8_database_keeps_its_served_requests_and_takes_refused_ones(tmp_path):
    """Schema 8 (the release before refused requests were listed, tests/data/make_store_v8.py):
    two served requests, one finished and one a crash interrupted. The table is rebuilt (a
    request may now have no conversation, and an error): every row comes back as it was,
    still tied to its conversation, with no error; a refused request is stored beside them;
    deleting the conversation still takes its rows with it."""
    from app.store.served_log import REFUSED

    path = tmp_path / "logitscope.sqlite3"
    shutil.copy(FIXTURE_V8, path)
    assert user_version(path) == 8
    store = Store(path)
    assert store.migrated_from == 8 and user_version(path) == SCHEMA_VERSION
    assert user_version(backup_path(path, 8)) == 8
    (conversation,) = store.reads.conversations()
    interrupted, finished = store.served.recent()
    assert (finished.id, interrupted.id) == (1, 2)
    assert {finished.conversation_id, interrupted.conversation_id} == {conversation.id}
    assert (finished.endpoint, finished.finish_reason, finished.tokens, finished.error) == (
        "/v1/chat/completions",
        "stop",
        3,
        None,
    )
    assert finished.sent["seed"] == 4 and finished.client == "127.0.0.1 · curl/8.5"
    assert store.served.messages_of(finished.id) == ({"role": "user", "content": "What is the capital of Spain?"},)
    assert (interrupted.finish_reason, interrupted.tokens, interrupted.sent) == (None, 0, {"prompt": "a"})
    assert store.served.of_conversation(conversation.id).id in (1, 2)
    refused = store.served.add_refused("127.0.0.1", "chat", "tiny", {"temprature": 1}, [], "temprature: unknown")
    assert [r.id for r in store.served.recent()] == [refused.id, 2, 1]
    assert store.served.recent()[0].finish_reason == REFUSED and store.served.recent()[0].error
    store.writes.delete_conversation(conversation.id)
    assert [r.id for r in store.served.recent()] == [refused.id]
    assert store.integrity() == "ok"
    store.close()
