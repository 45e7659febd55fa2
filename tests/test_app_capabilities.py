"""The app asks the backend's declared capabilities: the menu items a backend cannot do
are disabled with the backend's reason, and a server's steps are labelled by the stage
its numbers are (never ``raw``). Against the tiny model locally and a real
``mlx_lm.server`` serving it on 127.0.0.1."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("httpx")

from app.score_dialog import REPLAY_TEXT  # noqa: E402
from engine.params import SamplingParams  # noqa: E402, F401 (the label test)
from tests.test_app import TIMEOUT, close_window, open_window, profile, send  # noqa: E402, F401
from tests.test_app_remote import connect, replies, tiny_server  # noqa: E402, F401

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


def test_menus_follow_the_backends_capabilities(qtbot, profile, tiny_folder, tiny_server):  # noqa: F811
    window = open_window(qtbot, profile, str(tiny_folder))
    try:
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

        # Back to the local model: everything is enabled again, the reasons gone.
        window.load_model(str(tiny_folder))
        qtbot.waitUntil(lambda: window.model_info.capabilities.score, timeout=TIMEOUT)
        assert all(a.isEnabled() and "Not available" not in a.toolTip() for a in actions(window).values())
    finally:
        close_window(window)
