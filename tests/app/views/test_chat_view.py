"""The chat view appends: a 20,000-token conversation is drawn once when opened, and a reply
streaming into it costs the document the same work as into a 100-token one (counted, not
timed: tokens inserted, sections drawn, headers rewritten, tokens re-styled)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.model.chat import ChatModel  # noqa: E402
from app.store.compare_runs import branch_key  # noqa: E402
from app.store.store import Store  # noqa: E402
from app.views.chat_view import ChatView  # noqa: E402
from app.views.throttle import RedrawClock  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.app.model.test_model import GREEDY, VARIANTS, finished, step  # noqa: E402

REPLY = 500


def conversation(store: Store, tokens: int) -> int:
    """``tokens`` generated tokens in replies of up to REPLY."""
    conv = store.writes.new_conversation("sys", "long")
    after, done = None, 0
    while done < tokens:
        n = min(REPLY, tokens - done)
        user = store.writes.add_user_message(conv.id, f"turn {done}", after)
        reply = store.writes.add_assistant_message(conv.id, user.id)
        steps = [step(i, 7 + i % 5) for i in range(n)]
        after = store.writes.add_branch(reply.id, steps, "x" * n, "length", "m", SamplingParams()).id
        done += n
    return conv.id


def counts(view: ChatView) -> dict[str, int]:
    w = view.writer
    return {
        "tokens": w.tokens_drawn,
        "sections": w.sections_drawn,
        "headers": w.headers_rewritten,
        "restyled": w.tokens_restyled,
        "characters": view.document().characterCount(),
    }


def stream_a_reply(qtbot, tmp_path, history: int, monkeypatch) -> tuple[dict, dict]:
    """Open a conversation of ``history`` tokens, stream 300 tokens into it, save, select.
    Returns the counts after opening and what streaming added to them."""
    store = Store(tmp_path / f"db{history}.sqlite3")
    model = ChatModel(store)
    model.open_conversation(conversation(store, history))
    view = ChatView()
    qtbot.addWidget(view)
    rendered = []
    monkeypatch.setattr(view, "setHtml", lambda html: rendered.append(html))
    view.resize(700, 500)
    view.show()
    # A clock that never moves: redraws run only when flushed below, as many at any length.
    view.bind(model, RedrawClock(view, now=lambda: 0.0))
    opened = counts(view)
    jobs = []
    model.events.job_submitted.connect(jobs.append)
    model.generation.send("and then?", GREEDY.with_changes(seed=7))  # its header ("seed 7") as long in both runs
    tag = jobs[-1].tag
    for i in range(300):
        model.generation.on_token(tag, step(i, 9))
        if i % 7 == 6:
            view.flushes.flush()  # a tick of the window's clock
    view.flushes.flush()
    model.generation.on_finished(tag, finished())
    model.select((branch_key(model.thread[1].branch.id), 5))  # a token of the first reply
    view.flushes.flush()
    after = counts(view)
    assert rendered == []  # never re-rendered as HTML
    store.close()
    return opened, {k: after[k] - opened[k] for k in after}


def test_a_20000_token_conversation_is_drawn_once_and_appended_to(qtbot, tmp_path, monkeypatch):
    opened_small, small = stream_a_reply(qtbot, tmp_path, 100, monkeypatch)
    opened, large = stream_a_reply(qtbot, tmp_path, 20_000, monkeypatch)
    assert opened["tokens"] == 20_000 and opened["sections"] == 1 + 2 * 40  # system + 40 turns
    assert opened_small["tokens"] == 100
    # Streaming 300 tokens, saving the reply and selecting a token: the same document work
    # whatever the conversation's length: the reply's tokens, its two sections, its header
    # (saved: "writing…" goes, the finish reason comes), the newest token and the picked one.
    assert large == small
    assert large["tokens"] == 300 and large["sections"] == 2 and large["headers"] == 1
    assert large["restyled"] <= 300 // 7 + 3  # a token left behind per redraw, and the pick
    # "You", the message, "Assistant", 300 tokens of " t9" and the header's note.
    assert large["characters"] == small["characters"] > 300 * 3


def test_compare_columns_stream_into_one_table_and_are_kept_in_place(qtbot, tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    model = ChatModel(store)
    view = ChatView()
    qtbot.addWidget(view)
    view.show()
    view.bind(model)
    jobs = []
    model.events.job_submitted.connect(jobs.append)
    model.generation.send_compare("which?", VARIANTS)
    job = jobs[-1]
    section = view.writer.sections[-1]
    assert section.table.columns() == 3
    for i in range(20):
        for k, tag in enumerate(job.tags):
            model.generation.on_token(tag, step(i, 5 + k))
        view.flushes.flush()
    drawn = view.writer.tokens_drawn
    assert [body.drawn for body in section.bodies] == [20, 20, 20]
    cells = [section.table.cellAt(1, k) for k in range(3)]
    texts = []
    for cell in cells:
        cursor = cell.firstCursorPosition()
        cursor.setPosition(cell.lastPosition(), cursor.MoveMode.KeepAnchor)
        texts.append(cursor.selectedText())
    assert texts == [" t5" * 20, " t6" * 20, " t7" * 20]
    for tag in job.tags:
        model.generation.on_finished(tag, finished())
    assert view.writer.tokens_drawn == drawn  # saved: the columns are renamed, not redrawn
    assert view.writer.sections[-1] is section and "Keep" in view.toPlainText()
    # A token of column C, by its anchor, is the model's token.
    ref = (model.entries[-1].columns[2].stream, 4)
    point = view.point_of(ref)
    assert view.ref_at(point) == ref and view.step_at(point).token_id == 7
    store.close()


def test_a_reply_saved_without_its_steps_shows_its_text(qtbot, tmp_path):
    """The app stopped between writing a reply's row and its steps: the text still shows."""
    store = Store(tmp_path / "db.sqlite3")
    conv = store.writes.new_conversation("", "t")
    user = store.writes.add_user_message(conv.id, "hi", None)
    reply = store.writes.add_assistant_message(conv.id, user.id)
    store.writes.add_branch(reply.id, [], "Paris, of course.", "stop", "m", SamplingParams(), "[]")
    model = ChatModel(store)
    model.open_conversation(conv.id)
    view = ChatView()
    qtbot.addWidget(view)
    view.bind(model)
    assert "Paris, of course." in view.toPlainText()
    store.close()
