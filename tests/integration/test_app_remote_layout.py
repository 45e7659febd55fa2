"""A server's labels against a real ``mlx_lm.server`` (the tiny model, on 127.0.0.1; issue 24,
point 21): the timeline's caption no longer takes the plots' height, and the status bar
keeps "server reports: <stage>" whole in an 800 px window."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("httpx")

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send, settle  # noqa: E402
from tests.support.local_server import mlx_lm_server  # noqa: E402

STAGE = "server reports: penalties"  # the connection's (status bar): what mlx_lm.server reports
REPLY_STAGE = "server reports: raw"  # a greedy reply's: no penalty ran, so its numbers are raw
GREEDY = SamplingParams(max_tokens=12, top_logprobs=5)


def plot_heights(window) -> list[float]:
    return [plot.vb.height() for plot in (window.timeline.prob_plot, window.timeline.entropy_plot)]


def shown_text(label) -> str:
    """What a label draws: a fitted label's form for its width, else its text."""
    return label.shown_text() if hasattr(label, "shown_text") else label.text()


@pytest.fixture(scope="module")
def server(tiny_folder, tmp_path_factory: pytest.TempPathFactory):
    """mlx_lm.server serving the tiny model folder."""
    with mlx_lm_server(Path(tiny_folder), tmp_path_factory.mktemp("mlx-server")) as url:
        yield url


def connected(qtbot, profile, tiny_folder, url: str):
    """A window whose local model answered once, then connected to ``url``."""
    from app.model.remote_jobs import RemoteSpec

    window = open_window(qtbot, profile, str(tiny_folder))
    window.resize(1500, 900)
    send(qtbot, window, "hello there", GREEDY)
    window._redraw_if_dirty()
    settle(window)
    window.local_heights = plot_heights(window)
    window.connect_remote(RemoteSpec(url, ""))
    qtbot.waitUntil(lambda: window.model_info.backend == "remote" or bool(window.last_error), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    return window


def test_the_timeline_caption_leaves_the_plots_their_height(qtbot, profile, tiny_folder, server):
    """The server's stage was the plots' titles: a title's height taken from each plot."""
    window = connected(qtbot, profile, tiny_folder, server)
    send(qtbot, window, "hello again", GREEDY)
    assert not window.last_error, window.last_error
    window._redraw_if_dirty()
    settle(window)
    window.grab().save("/tmp/remote-1500.png")
    remote = plot_heights(window)
    assert all(r >= h - 2 for r, h in zip(remote, window.local_heights, strict=True)), (window.local_heights, remote)
    caption = window.timeline.origin.label  # the reply's origin, its stage kept to the last
    assert caption.isVisible() and REPLY_STAGE in shown_text(caption)
    note = window.timeline.entropy_note
    assert note.text() == "entropy: not reported by the server"
    assert window.timeline.entropy_plot.vb.sceneBoundingRect().contains(note.sceneBoundingRect())
    close_window(window)


def test_the_status_bar_keeps_the_servers_stage_whole(qtbot, profile, tiny_folder, server):
    """At 800 px the status bar cut its label to "server reports: p…"."""
    window = connected(qtbot, profile, tiny_folder, server)
    window.resize(800, 600)
    settle(window)
    window.grab().save("/tmp/remote-800.png")
    label = window.status.model_label
    shown = shown_text(label)
    assert STAGE in shown, shown
    assert label.fontMetrics().horizontalAdvance(shown) <= label.contentsRect().width(), (shown, label.width())
    assert STAGE in label.text() and label.toolTip() == label.text()  # the whole label on hover
    close_window(window)
