"""The Qt-free entries (``app.model.entries``): what the chat shows and what the model is sent."""

from app.model.entries import build_entries, context_before, latest_token
from app.model.streams import Reply
from app.store.compare_runs import CompareColumn, CompareRun, branch_key, reply_key
from app.store.store import Branch, Message
from engine.api.params import SamplingParams
from tests.app.model.test_model import step


def thread():
    first = Message(1, "user", "hi")
    reply = Message(
        2,
        "assistant",
        branches=[
            Branch(10, "old answer", "stop", "m", SamplingParams(), [step(0)]),
            Branch(11, "new answer", "length", "m", SamplingParams(), [step(0), step(1)]),
        ],
        active=1,
    )
    return [first, reply, Message(3, "user", "and then?"), Message(4, "assistant")]


def test_entries_follow_the_active_branch_and_live_replies():
    shown = thread()
    live = Reply(7, 4, SamplingParams(), [step(0)])
    entries = build_entries(shown, [live], {}, "be brief", "ready")
    assert [e.role for e in entries] == ["system", "user", "assistant", "user", "assistant"]
    assert entries[2].text == "new answer" and (entries[2].branch, entries[2].branches) == (1, 2)
    assert entries[2].note == "[length]" and entries[2].stream == branch_key(11)
    assert entries[4].streaming and entries[4].branches == 1 and entries[4].stream == reply_key(7)
    assert [e.key for e in entries] == [("system",), ("user", 1), ("assistant", 2), ("user", 3), ("assistant", 4)]
    assert build_entries([], [], {}, "be brief", "ready")[0].role == "welcome"
    assert latest_token(entries) == (reply_key(7), 0)


def test_an_undecided_compare_run_shows_its_columns_a_kept_one_its_reply():
    shown = thread()
    run = CompareRun(
        2,
        [
            CompareColumn("Greedy", SamplingParams(), branch_key(10)),
            CompareColumn("Hot", SamplingParams(), branch_key(11)),
        ],
        id=5,
    )
    runs = {10: run, 11: run}
    (entry,) = [e for e in build_entries(shown, [], runs, "", "") if e.message_id == 2]
    assert entry.role == "compare" and entry.finished
    assert [c.label for c in entry.columns] == ["A · Greedy", "B · Hot"] and len(entry.columns[1].steps) == 2
    assert entry.bodies() == [(branch_key(10), entry.columns[0].steps, 0), (branch_key(11), entry.columns[1].steps, 0)]
    run.kept = 1
    (entry,) = [e for e in build_entries(shown, [], runs, "", "") if e.message_id == 2]
    assert entry.role == "assistant" and entry.kept == "kept B · Hot of 2 settings"
    # The header is what changed; the tokens are the same list.
    assert entry.steps is shown[1].branch.steps  # no copy: the view appends to what it drew


def test_context_uses_the_active_branch_text():
    shown = thread()
    assert context_before(shown, 3, "be brief") == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "new answer"},
        {"role": "user", "content": "and then?"},
    )
    assert context_before(shown, 1, "") == ({"role": "user", "content": "hi"},)
