"""The Qt-free conversation model: what is shown and what the model is sent."""

from app.conversation import LiveReply, build_entries, context_before, latest_token, message_of_entry
from app.store import Branch, Message
from engine.params import SamplingParams


def thread():
    first = Message(1, "user", "hi")
    reply = Message(
        2,
        "assistant",
        branches=[
            Branch(10, "old answer", "stop", "m", SamplingParams(), []),
            Branch(11, "new answer", "length", "m", SamplingParams(), []),
        ],
        active=1,
    )
    return [first, reply, Message(3, "user", "and then?"), Message(4, "assistant")]


def test_entries_follow_the_active_branch_and_live_replies():
    shown = thread()
    live = LiveReply(4, SamplingParams())
    entries = build_entries(shown, [live], "be brief", "ready")
    assert [e.role for e in entries] == ["system", "user", "assistant", "user", "assistant"]
    assert entries[2].text == "new answer" and (entries[2].branch, entries[2].branches) == (1, 2)
    assert entries[2].note == "[length]"
    assert entries[4].streaming and entries[4].branches == 1
    assert message_of_entry(entries, shown, 2).id == 2
    assert build_entries([], [], "be brief", "ready")[0].role == "welcome"
    assert latest_token(entries) is None


def test_context_uses_the_active_branch_text():
    shown = thread()
    assert context_before(shown, 3, "be brief") == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "new answer"},
        {"role": "user", "content": "and then?"},
    )
    assert context_before(shown, 1, "") == ({"role": "user", "content": "hi"},)
