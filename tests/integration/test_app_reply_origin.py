"""Every view labels a reply by the backend, model and precision that wrote it, not by the
model loaded now (issue 24, point 1): a local reply selected after connecting to a server
reads as local, with its entropy, and a server's reply selected after going back to the
local model says what the server reported and that it sent no entropy — also after a
restart, from what the store recorded. Against a real ``mlx_lm.server`` started on a fresh
home folder, tokens clicked in the chat with the mouse. And the status bar speaks of the
server only for a server's reply (point 3): not when the local model scores a text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("httpx")

from PySide6.QtCore import Qt  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.integration.test_app_remote import connect, replies  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, token_point  # noqa: E402
from tests.support.local_server import mlx_lm_server  # noqa: E402

# A greedy request sets no bias or penalty: mlx_lm.server's numbers (after its penalties) are
# raw, as the steps say; the header names that one stage (it said "penalties" above and
# "the server reports raw only" below it).
SERVER_STAGE = (
    "server reports: raw (detected for mlx_lm.server; its numbers are after penalties, which did not run here)"
)
NO_ENTROPY = "entropy: not reported by the server"


@pytest.fixture(scope="module")
def fresh_home_server(tiny_folder, tmp_path_factory: pytest.TempPathFactory):
    """mlx_lm.server serving the tiny model, started with HOME an empty folder (no
    Hugging Face cache, no settings): a fresh machine's first server."""
    patch = pytest.MonkeyPatch()
    patch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    server = mlx_lm_server(Path(tiny_folder), tmp_path_factory.mktemp("mlx-server"))
    try:
        url = server.__enter__()
    finally:
        patch.undo()  # the app and the tests keep their own HOME
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


def click_token(qtbot, window, ref) -> None:
    """A real click on token ``ref`` in the chat (it selects it for every view)."""
    qtbot.mouseClick(window.chat.viewport(), Qt.MouseButton.LeftButton, pos=token_point(window, ref))
    qtbot.waitUntil(lambda: window.model.selection == ref, timeout=TIMEOUT)
    window._redraw_if_dirty()


def title(plot) -> str:
    return plot.titleLabel.text if plot.titleLabel.isVisible() else ""


def check_local(window, local_label: str) -> None:
    timeline, inspector = window.timeline, window.inspector
    assert title(timeline.prob_plot) == "" and title(timeline.entropy_plot) == ""
    assert timeline.entropy_note.text() == ""
    assert np.isfinite(timeline.entropy_curve.getData()[1]).all()  # its own entropies, drawn
    assert "server" not in inspector.title.text() and local_label in inspector.title.text()
    assert timeline.origin.label.text() == local_label


def check_remote(window, url: str) -> None:
    timeline, inspector = window.timeline, window.inspector
    # Beside the stage selector and inside the entropy plot: a plot title took the plot's height.
    assert title(timeline.prob_plot) == "" and title(timeline.entropy_plot) == ""
    assert timeline.entropy_note.text() == NO_ENTROPY
    assert SERVER_STAGE in inspector.title.text() and url in inspector.title.text()
    assert (
        "penalties (detected" not in inspector.title.text() and "reports <b>raw</b> only" not in inspector.title.text()
    )
    assert url in timeline.origin.label.text() and SERVER_STAGE in timeline.origin.label.text()


def test_each_reply_is_labelled_by_what_wrote_it_whatever_is_loaded_now(
    qtbot,
    profile,
    tiny_folder,
    fresh_home_server,
):
    url = fresh_home_server
    window = open_window(qtbot, profile, str(tiny_folder))
    statuses: list[str] = []
    window.model.events.status.connect(statuses.append)
    local_label = f"{window.model_info.name} · float32 · local"
    greedy = SamplingParams(max_tokens=6, top_logprobs=5)
    send(qtbot, window, "hello there", greedy)
    local = replies(window)[-1].stream
    assert any(s.startswith("Prompt: ") and s.endswith(" tokens") for s in statuses)

    connect(qtbot, window, url)
    assert window.model_info.backend == "remote"
    click_token(qtbot, window, (local, 1))
    check_local(window, local_label)  # it said "server reports: penalties" before

    statuses.clear()
    send(qtbot, window, "and again", greedy)
    remote = replies(window)[-1].stream
    assert all(s.reported_stage is not None for s in window.model.steps_of(remote))
    assert "Prompt: tokens not reported by the server" in statuses  # a server really did not say
    click_token(qtbot, window, (remote, 1))
    check_remote(window, url)

    window.load_model(str(tiny_folder))  # back to the local model
    qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.backend == "local", timeout=TIMEOUT)
    click_token(qtbot, window, (remote, 1))
    check_remote(window, url)  # its entropy plot was empty, without a word
    click_token(qtbot, window, (local, 1))
    check_local(window, local_label)

    # After a restart: the store recorded what wrote each reply.
    conversation = window.model.conversation.id
    close_window(window)
    window = open_window(qtbot, profile, str(tiny_folder))
    window.open_conversation(conversation)
    local, remote = (entry.stream for entry in replies(window))
    branches = {b.id: b for m in window.thread_messages if m.role == "assistant" for b in m.branches}
    assert branches[local[1]].backend == "local"
    assert branches[remote[1]].backend == "remote:mlx_lm:penalties:detected"
    click_token(qtbot, window, (remote, 1))
    check_remote(window, url)
    click_token(qtbot, window, (local, 1))
    check_local(window, local_label)
    close_window(window)


def test_scoring_with_the_local_model_says_nothing_of_a_server(qtbot, profile, tiny_folder):
    from tests.app.shell.test_app_score import TEXT

    window = open_window(qtbot, profile, str(tiny_folder))
    statuses: list[str] = []
    window.model.events.status.connect(statuses.append)
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert window.model.last_assistant().branch.finish_reason == "scored"
    assert statuses and not any("server" in s for s in statuses), statuses
    close_window(window)
