"""A served request in the model layer (no Qt, no engine: the job it makes is read, not run):
how it is stored and shown, and that what the model is sent again for its reply — a branch,
a replay, an analysis, the person's next turn — is what its client sent, whatever the
thread can show of it; a completion's raw prompt is refused for all of those; a refused or
unstorable request leaves nothing behind."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from app.model.chat import ChatModel
from app.model.jobs import ChatJob
from app.model.model_in_use import ModelInUse
from app.model.served import RAW_PROMPT, ServedJob
from app.store.store import Store
from engine.api.backend import ModelInfo
from engine.api.events import Finished, FinishReason
from engine.api.params import SamplingParams
from engine.serve.request_fields import read_request

GREETING = [
    {"role": "system", "content": "You are Mia."},
    {"role": "assistant", "content": "Hi! I am Mia."},
    {"role": "user", "content": "hello"},
    {"role": "system", "content": "[Mia is shy]"},
    {"role": "user", "content": "how are you?"},
]


@pytest.fixture
def chat(tmp_path):
    in_use = ModelInUse()
    in_use.info = ModelInfo("tiny", "tiny", 300, 512, True, (2,), "tiny")
    model = ChatModel(Store(tmp_path / "db.sqlite3"), in_use=in_use)
    model.jobs = []
    model.events.job_submitted.connect(model.jobs.append)
    return model


def serve(chat, body: dict, chat_endpoint: bool = True) -> tuple[ServedJob, Future]:
    request = read_request({"model": "tiny", **body}, chat_endpoint, 512)
    started: Future = Future()
    chat.served.arrive(request, lambda event: None, started)
    (job,) = [j for j in chat.jobs if isinstance(j, ServedJob)]
    chat.jobs.clear()
    return job, started


def finish(chat, tag: int, text: str = " fine") -> None:
    """The worker's report that the reply ended (its steps are not needed here)."""
    finished = Finished(tag, FinishReason.STOP, 5, 0, 0, 0.0, 0.0, text)
    chat.generation.on_finished(tag, finished)
    chat.served.on_finished(tag, finished)
    chat.background.wait()


def test_what_is_sent_again_is_what_the_client_sent(chat):
    job, _ = serve(chat, {"messages": GREETING, "temperature": 0.7, "top_k": 5, "max_tokens": 8})
    assert job.request.messages == tuple(GREETING)
    assert job.request.params.seed is not None  # drawn now, so the reply can be written again
    (row,) = chat.served.rows
    assert row.sent == {"temperature": 0.7, "top_k": 5, "max_tokens": 8} and row.endpoint == "chat"
    assert not chat.busy()  # a served request does not hold the person's chat
    chat.open_conversation(row.conversation_id)
    # Shown as the thread can: the greeting after an empty turn, the aside inside the turn.
    assert chat.system_prompt == "You are Mia."
    assert [(m.role, m.content if m.role == "user" else m.branch.text) for m in chat.thread[:-1]] == [
        ("user", ""),
        ("assistant", "Hi! I am Mia."),
        ("user", "hello\n\nSystem: [Mia is shy]\n\nhow are you?"),
    ]
    assert chat.busy()  # its reply is being written, here
    finish(chat, job.tag)
    reply = chat.thread[-1]
    # Sent again exactly: the reply's context, and after it the reply and the next turn.
    assert chat.context_for(reply) == tuple(GREETING)
    chat.generation.send("and then?", SamplingParams(max_tokens=4))
    (turn,) = [j for j in chat.jobs if isinstance(j, ChatJob)]
    assert turn.messages == (
        *GREETING,
        {"role": "assistant", "content": " fine"},
        {"role": "user", "content": "and then?"},
    )
    assert turn.enable_thinking is None  # the template's default, as the served reply was written
    # A conversation of the person's own is sent as its thread.
    finish(chat, turn.tag)
    chat.new_chat()
    chat.generation.send("plain", SamplingParams(max_tokens=4))
    assert chat.jobs[-1].messages == (
        {"role": "system", "content": chat.system_prompt},
        {"role": "user", "content": "plain"},
    )


def test_a_completion_is_inspected_not_continued(chat):
    job, _ = serve(chat, {"prompt": "once upon", "max_tokens": 4}, chat_endpoint=False)
    finish(chat, job.tag, " a time")
    (row,) = chat.served.rows
    chat.open_conversation(row.conversation_id)
    assert [m.content for m in chat.thread if m.role == "user"] == ["Completion of: once upon"]
    statuses = []
    chat.events.status.connect(statuses.append)
    assert not chat.generation.send("go on", SamplingParams())
    assert not chat.generation.regenerate(SamplingParams())
    assert statuses[-1] == RAW_PROMPT and not chat.jobs
    from app.model.reply_checks import selected_reply_problem

    chat.selection = (("branch", chat.thread[-1].branch.id), 0)
    assert "raw prompt" in selected_reply_problem(chat.reading, "tiny", "check", "")


def test_a_refused_or_deleted_request_leaves_nothing(chat):
    job, started = serve(chat, {"messages": GREETING[2:3], "max_tokens": 4})
    removed = []
    chat.served.events.removed.connect(removed.append)
    row = chat.served.rows[0]
    chat.generation.on_job_rejected(job.tag, ValueError("no"))
    chat.served.on_job_rejected(job.tag, ValueError("no"))
    assert chat.store.reads.conversations() == [] and removed == [row.id]
    (refused,) = chat.served.rows  # listed still, with the error its client got (issue 51 #10)
    assert refused.finish_reason == "refused" and refused.error == "no" and refused.conversation_id is None
    chat.served.rows.clear()
    # Deleting a served conversation takes its row out of the list too.
    job, _ = serve(chat, {"messages": GREETING[2:3], "max_tokens": 4})
    finish(chat, job.tag)
    row = chat.served.rows[0]
    chat.open_conversation(row.conversation_id)
    chat.delete_conversation()
    assert chat.served.rows == [] and removed[-1] == row.id
    assert [r.finish_reason for r in chat.store.served.recent()] == ["refused"]
    # A client that gave up before it was stored leaves nothing either.
    request = read_request({"messages": GREETING[2:3]}, True, 512)
    gone: Future = Future()
    gone.cancel()
    chat.served.arrive(request, lambda event: None, gone)
    assert chat.store.reads.conversations() == [] and not chat.jobs


def test_no_model_that_can_serve_is_a_refusal(chat):
    from dataclasses import replace

    from engine.api.capabilities import Capabilities

    chat.in_use.info = replace(chat.in_use.info, capabilities=Capabilities(reasons=(("serve", "a server's own."),)))
    request = read_request({"messages": GREETING[2:3]}, True, 512)
    started: Future = Future()
    chat.served.arrive(request, lambda event: None, started)
    with pytest.raises(Exception, match="a server's own"):
        started.result(0)
    assert chat.store.reads.conversations() == [] and not chat.jobs
