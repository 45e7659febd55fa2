"""A bfloat16 draft or second model on MLX's CPU runs at ~0.1 tokens/s, and the dialogs said
nothing of it before the person waited (issue 51, #16). Choosing bfloat16 in Models → Draft
model… or Compare models… now says so at once, where MLX computes on the CPU
(``ModelInfo.device``). The precision is chosen with real keys."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.views.model_dialogs import CPU_BFLOAT16  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, send  # noqa: E402


def choose_with_keys(qtbot, combo, data: str) -> None:
    """Pick the item holding ``data`` with the keyboard: focus the combo, Home, then Down."""
    combo.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is combo, timeout=TIMEOUT)
    qtbot.keyClick(combo, Qt.Key.Key_Home)
    for _ in range(combo.findData(data)):
        qtbot.keyClick(combo, Qt.Key.Key_Down)
    assert combo.currentData() == data


def test_this_machine_computes_on_mlx_cpu(qtbot, profile, tiny_folder):
    """What the other tests here assume: the tests run where MLX's device is the CPU."""
    import mlx.core as mx

    window = open_window(qtbot, profile, str(tiny_folder))
    assert window.model_info.device == ("cpu" if mx.default_device() == mx.cpu else "gpu")
    close_window(window)


def test_the_draft_dialog_says_bfloat16_is_slow_on_the_cpu(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    if window.model_info.device != "cpu":
        pytest.skip("MLX computes on a GPU here: bfloat16 is fast")
    window.draft.action.trigger()
    dialog = window.draft.dialog
    qtbot.waitUntil(dialog.isVisible, timeout=TIMEOUT)
    assert not dialog.slow_note.isVisible()
    choose_with_keys(qtbot, dialog.precision, "bfloat16")
    assert dialog.slow_note.isVisible() and CPU_BFLOAT16 in dialog.slow_note.text()
    dialog.grab().save("/tmp/ls/draft_bfloat16_cpu.png")
    choose_with_keys(qtbot, dialog.precision, "float16")
    assert not dialog.slow_note.isVisible()
    dialog.close()
    close_window(window)


def test_the_compare_dialog_says_bfloat16_is_slow_on_the_cpu(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    if window.model_info.device != "cpu":
        pytest.skip("MLX computes on a GPU here: bfloat16 is fast")
    send(qtbot, window, "the hat", SamplingParams(max_tokens=4, temperature=0.0))
    branch = window.model.last_assistant().branch
    window.model.select((("branch", branch.id), 0))
    action = window.analysis_actions.compare_models
    assert action.isEnabled(), action.toolTip()
    action.trigger()
    dialog = window.compare_models.dialog
    qtbot.waitUntil(dialog.isVisible, timeout=TIMEOUT)
    assert not dialog.slow_note.isVisible()
    choose_with_keys(qtbot, dialog.precision, "bfloat16")
    assert dialog.slow_note.isVisible() and CPU_BFLOAT16 in dialog.slow_note.text()
    dialog.grab().save("/tmp/ls/compare_bfloat16_cpu.png")
    dialog.close()
    close_window(window)


def test_on_a_gpu_the_dialogs_say_nothing_of_bfloat16(qtbot):
    from app.views.draft_dialog import DraftModelDialog

    dialog = DraftModelDialog("tiny", ["default"], None, device="gpu")
    qtbot.addWidget(dialog)
    dialog.show()
    choose_with_keys(qtbot, dialog.precision, "bfloat16")
    assert not dialog.slow_note.isVisible()
