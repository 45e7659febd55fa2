"""The status bar's figures belong to what is shown (issue 24, point 14): a scored text's
perplexity goes with its conversation and its model; a reply being written shows its own
rate (or nothing yet), never the "generation 0.0 tok/s" a scored text left. The tiny model
on the real worker; keys sent to the focused widget."""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.app.shell.test_app_score import TEXT  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402


def score(qtbot, window) -> None:

    assert window.score_controller().score_text(TEXT)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)


def perplexity(window) -> str:
    return window.score_controller().perplexity_label.text()


def test_a_scored_texts_figures_go_with_its_conversation_and_its_model(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    score(qtbot, window)
    assert perplexity(window).startswith("perplexity ")
    scored_speed = window.status.speed_label.text()

    # New chat (Ctrl+N in the message box): another conversation, not the scored text's figures.
    window.composer.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.composer, timeout=TIMEOUT)
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.model.conversation is None, timeout=TIMEOUT)
    assert perplexity(window) == ""

    # Another model (here the same folder loaded again): the figures were the last one's.
    score(qtbot, window)
    assert perplexity(window).startswith("perplexity ")
    before = window.model_info
    window.load_model(str(tiny_folder))
    qtbot.waitUntil(lambda: window.model_info is not before, timeout=TIMEOUT)
    # model_loaded reaches the window and the score controller as two queued events
    qtbot.waitUntil(lambda: perplexity(window) == "", timeout=TIMEOUT)
    assert window.status.speed_label.text() == ""
    assert scored_speed == ""  # a scored text's speed is the perplexity's: not "generation 0.0 tok/s"
    close_window(window)


class SlowDecode:
    """An EngineSession whose decode steps take 40 ms, so a reply streams long enough to have
    a rate while it is written."""

    def __new__(cls):
        from engine.session.session import EngineSession

        class Slow(EngineSession):
            def step(self):
                time.sleep(0.04)
                return super().step()

        return Slow()


def test_a_reply_being_written_shows_its_own_rate_not_the_last_figures(qtbot, profile, tiny_folder):

    window = open_window(qtbot, profile, str(tiny_folder), session_factory=SlowDecode)
    score(qtbot, window)  # what left "generation 0.0 tok/s" behind
    shown: list[str] = []
    window.model.events.tokens_added.connect(lambda _s: shown.append(window.status.speed_label.text()))
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    window.controls.set_params(SamplingParams(max_tokens=30, logit_bias=no_eos))
    window.composer.setPlainText("count with me")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert len(shown) == 30
    live_rate = r"generating (\d+\.\d) tok/s"
    # Nothing, or the reply's own rate: never a stale figure ("generation 0.0 tok/s").
    assert all(text == "" or re.fullmatch(live_rate, text) for text in shown), shown
    live = [float(m.group(1)) for text in shown if (m := re.fullmatch(live_rate, text))]
    # No speed asked: a step sleeps 40 ms, so the rate is at most 25 a second however fast the
    # machine; it reads 0.0 only if a step took over 20 s (a hang, not a slow machine).
    assert live and all(0 < rate < 40 for rate in live), shown
    assert shown[0] == ""  # nothing until there is a rate
    final = window.status.speed_label.text()
    assert re.fullmatch(r"prompt \d+\.\d tok/s · generation \d+\.\d tok/s", final) and " 0.0 " not in final
    close_window(window)
