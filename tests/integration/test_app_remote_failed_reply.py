"""A server reply that fails before its first token (the real ``mlx_lm.server``, stopped)
leaves nothing selected: the inspector and the timeline went on showing the previous
reply's token, as if it were the failed reply's."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from engine.api.params import SamplingParams  # noqa: E402
from tests.integration.test_app_remote import connect, replies  # noqa: E402
from tests.support.app_window import close_window, open_window, send  # noqa: E402
from tests.support.local_server import mlx_lm_server  # noqa: E402


def test_a_failed_server_reply_does_not_show_the_previous_token(qtbot, profile, tiny_folder, tmp_path):
    window = open_window(qtbot, profile, str(tiny_folder))
    greedy = SamplingParams(max_tokens=6, top_logprobs=5)
    with mlx_lm_server(Path(tiny_folder), tmp_path / "server") as url:
        connect(qtbot, window, url)
        send(qtbot, window, "hello there", greedy)
        assert not window.last_error, window.last_error
        first = replies(window)[-1]
        assert first.steps and window.model.selection == (first.stream, len(first.steps) - 1)
        window._redraw_if_dirty()
        assert window.inspector.step is not None and window.timeline.steps
    # The server is gone: the next reply fails before any token.
    send(qtbot, window, "and again", greedy)
    assert "The server failed" in window.last_error or "stopped" in window.last_error, window.last_error
    window.error_box.close()
    failed = replies(window)[-1]
    assert failed.stream != first.stream and not failed.steps
    window._redraw_if_dirty()
    assert window.model.selection is None
    assert window.inspector.step is None and window.inspector.candidates == []
    assert "No token selected" in window.inspector.title.text()
    assert window.timeline.steps == []
    # The earlier reply is still there to click.
    window.select_token((first.stream, 1))
    window._redraw_if_dirty()
    assert window.inspector.step is not None and window.inspector.step.index == 1
    close_window(window)
