"""The app asks the backend's declared capabilities: the menu items a backend cannot do
are disabled with the backend's reason, and a server's steps are labelled by the stage
its numbers are (never ``raw``). Against the tiny model locally and a real
``mlx_lm.server`` serving it on 127.0.0.1."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("httpx")

from app.shell.score_actions import REPLAY_TEXT  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.integration.test_app_remote import connect, replies  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402

GATED = {REPLAY_TEXT: "replay", "Score text…": "score", "Compare settings side by side": "fork"}


def actions(window) -> dict:
    found = {}
    for menu_action in window.menuBar().actions():
        menu = menu_action.menu()
        for action in menu.actions() if menu is not None else ():
            if action.text() in GATED:
                found[action.text()] = action
    assert set(found) == set(GATED)
    return found


def test_menus_follow_the_backends_capabilities(qtbot, profile, tiny_folder, tiny_server):
    window = open_window(qtbot, profile, str(tiny_folder))
    try:
        # A saved reply's token selected: what Replay needs of the state (its own rule).
        send(qtbot, window, "hello", SamplingParams(max_tokens=4))
        saved = replies(window)[-1].stream
        window.select_token((saved, 1))
        local = actions(window)
        assert all(a.isEnabled() and "Not available" not in a.toolTip() for a in local.values())
        assert window.panel.compare.isEnabled()

        connect(qtbot, window, tiny_server)
        caps = window.model_info.capabilities
        assert not caps.score and not caps.replay and caps.fork
        remote = actions(window)
        for text, name in GATED.items():
            action = remote[text]
            assert action.isEnabled() == getattr(caps, name)
            if not action.isEnabled():
                assert caps.reason(name) in action.toolTip() and caps.reason(name) in action.statusTip()
        assert window.panel.compare.isEnabled()  # a server's fork is emulated
        # Past the disabled menu, the worker refuses the job with the same reason.

        window.score_controller().score_text("a text to score")
        qtbot.waitUntil(lambda: caps.reason("score") in window.last_error, timeout=TIMEOUT)
        qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
        window.last_error = ""

        # Back to the local model: everything is enabled again, the reasons gone.
        window.load_model(str(tiny_folder))
        qtbot.waitUntil(lambda: window.model_info.capabilities.score, timeout=TIMEOUT)
        back = actions(window)
        for text, name in GATED.items():  # the server's reasons are gone
            assert not caps.reason(name) or caps.reason(name) not in back[text].toolTip()
        # Score and Compare need nothing more; Replay needs a saved reply's token selected
        # (the scored text's turn was refused, so the selection is the chat's last token).
        assert back["Score text…"].isEnabled() and back["Compare settings side by side"].isEnabled()
        window.model.open_conversation(window.store.reads.conversation_list(5)[-1].id)
        window.select_token((saved, 1))
        assert back[REPLAY_TEXT].isEnabled() and "Not available" not in back[REPLAY_TEXT].toolTip()
    finally:
        close_window(window)


def test_a_server_step_is_labelled_by_its_stage(qtbot, profile, tiny_folder, tiny_server):
    from app.views.chat_view import tooltip_for

    window = open_window(qtbot, profile, str(tiny_folder))
    try:
        connect(qtbot, window, tiny_server)
        # A repetition penalty makes mlx_lm.server's numbers the "penalties" stage, not raw.
        params = SamplingParams(max_tokens=6, top_logprobs=3, repetition_penalty=1.3)
        send(qtbot, window, "hello there", params)
        assert not window.last_error, window.last_error
        (entry,) = replies(window)
        step = entry.steps[1]
        assert step.reported_stage == "penalties" and step.chain == ("penalties",)
        hover = tooltip_for(step)
        assert "p(penalties)" in hover and "p(raw)" not in hover and "p(final)" not in hover
        window.select_token((entry.stream, 1))
        window._redraw_if_dirty()
        title = window.inspector.title.text()
        assert "p(penalties)" in title and "p(raw)" not in title and "p after" not in title
        window.inspector.tabs.setCurrentIndex(1)  # the bars tab, where the table is
        table = window.inspector.table
        headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
        assert "p penalties" in headers and "p final" not in headers
        window.timeline._redraw_from_model()
        assert window.timeline.prob_plot.getAxis("left").labelText == "p(penalties)"
        # A local step again: the labels say final and raw.
        local = [s for e in window.entries if e.role == "assistant" for s in e.steps if s.reported_stage is None]
        assert not local  # every step of this conversation came from the server
    finally:
        close_window(window)
