"""The status bar in a narrow window (issue 51, #13): a long message ran into the fixed
fields ("…2 forcSmolLM2-135M…") and the model's name was cut to "SmolLM…loat32". The
message is now elided with a gap before them, and the model's name stays whole."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from engine.api.events import Finished, FinishReason  # noqa: E402
from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402

NAME = "SmolLM2-135M-Instruct"
LONG = (
    "Replay finished: same most likely token at 190 of 215 tokens, differs at 25, removed 12, "
    "and 2 forced by the grammar (first change at token 3)."
)


@pytest.fixture
def narrow(qtbot, profile, tiny_folder):
    """A window 760 px wide with a scored text's figures and a long model label."""
    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    window.status.model_ready(f"{NAME} · float32")  # the default model's label, as it loads
    # The last reply's figures beside the perplexity (the engine's Finished, as a reply ends).
    window.status.reply_finished(Finished(1, FinishReason.STOP, 20, 30, 0, 1234.5, 45.6, "…"))
    window.resize(760, 700)
    qtbot.waitUntil(lambda: window.width() <= 760 or window.minimumWidth() > 760, timeout=TIMEOUT)
    yield window
    close_window(window)


def test_a_long_message_is_elided_before_the_fixed_fields(qtbot, narrow):
    window = narrow
    bar = window.statusBar()
    bar.showMessage(LONG)
    qtbot.waitUntil(lambda: bar.currentMessage() == LONG, timeout=TIMEOUT)
    painter = window.status.messages
    shown = painter.shown_message()
    assert shown.endswith("…") and LONG.startswith(shown[:-1])  # cut, and said so
    from app.views.status import message_rect

    room = message_rect(bar)
    assert bar.fontMetrics().horizontalAdvance(shown) <= room.width()
    assert room.right() < window.status.model_label.x()  # a gap before the model's label
    assert bar.toolTip() == LONG  # the whole message on hover
    bar.grab().save("/tmp/ls/status_narrow.png")


def test_the_model_name_stays_whole_in_a_narrow_window(qtbot, narrow):
    label = narrow.status.model_label
    qtbot.waitUntil(lambda: label.width() >= label.minimumSizeHint().width(), timeout=TIMEOUT)
    assert label.shown_text() in (f"{NAME} · float32", NAME)  # never "SmolLM…loat32"
    speed = narrow.status.speed_label
    assert speed.shown_text() in ("prompt 1234.5 tok/s · generation 45.6 tok/s", "generation 45.6 tok/s")
    figures = narrow.score_controller().perplexity_label
    assert figures.shown_text() == figures.text() or figures.shown_text() == figures.text().split(" · ")[0]
