"""The first launch's welcome before the model's first progress (issue 51, #11): for ~8 s the
third bullet was drawn as the blue state line and no "Loading…" was said, since the state
was empty and the welcome's last line is taken as the state."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.model.entries import WELCOME  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window  # noqa: E402


def test_the_welcome_says_loading_and_keeps_its_three_bullets_from_the_start(qtbot, profile, tiny_folder):
    from app.shell.window import MainWindow

    db, settings = profile
    window = MainWindow(db_path=db, settings=settings, model=str(tiny_folder))
    qtbot.addWidget(window)
    window.show()
    # Before the event loop delivers any of the load's progress: the welcome as first drawn.
    window._redraw_if_dirty()
    lines = [line for line in window.chat.toPlainText().splitlines() if line.strip()]
    bullets = WELCOME.splitlines()
    assert len(bullets) == 3
    assert lines[1:4] == ["•  " + bullet for bullet in bullets], lines
    assert lines[-1] == "Loading the model…", lines
    window.grab().save("/tmp/ls/welcome_before_progress.png")
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=TIMEOUT)
    close_window(window)


def test_an_empty_state_is_drawn_as_an_empty_line_not_the_last_bullet():
    from app.model.entries import ChatEntry
    from app.views.chat_sections import section_blocks
    from app.views.theme import LIGHT

    blocks = section_blocks(ChatEntry("welcome", "\n".join([WELCOME, ""]), key=("welcome",)), LIGHT)
    texts = ["".join(text for text, _ in spans) for _, spans in blocks]
    assert texts[1:4] == ["•  " + bullet for bullet in WELCOME.splitlines()]
    assert texts[-1] == ""
