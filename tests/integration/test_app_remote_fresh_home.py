"""The app against a real ``mlx_lm.server`` started on a fresh home folder (no Hugging Face
cache folder, so its ``/v1/models`` fails), driven by key and mouse events: connecting goes
on with the model typed in and says why there is no list; settings the server cannot apply
are outlined all at once before anything is added, a stage switched off never counted."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("pytestqt")
httpx = pytest.importorskip("httpx")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QDialogButtonBox  # noqa: E402

from engine.api.params import DEFAULT_SAMPLERS, SamplingParams  # noqa: E402
from tests.app.shell.test_app_input import outlined  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window  # noqa: E402
from tests.support.local_server import mlx_lm_server  # noqa: E402


@pytest.fixture(scope="module")
def fresh_server(tiny_folder, tmp_path_factory: pytest.TempPathFactory):
    with mlx_lm_server(Path(tiny_folder), tmp_path_factory.mktemp("mlx-fresh"), fresh_home=True) as url:
        yield url


def type_into(qtbot, widget, text: str) -> None:
    """Focus ``widget``, select what it holds and type ``text`` over it, key by key."""
    widget.setFocus()
    qtbot.keyClick(widget, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(widget, text)


def connect_by_hand(qtbot, window, url: str, model: str):
    """Models → Connect to a server…: type the URL, click List models, type the model, click Connect."""
    dialog = window.open_connect_dialog()
    qtbot.waitExposed(dialog)
    type_into(qtbot, dialog.url, url)
    qtbot.mouseClick(dialog.list_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.probing, timeout=TIMEOUT)
    assert dialog.server_kind == "mlx_lm" and dialog.error.text() == ""
    assert dialog.focusWidget() is dialog.model  # ready for the model's name
    qtbot.keyClicks(dialog.model, model)
    before = window.model_info
    qtbot.mouseClick(dialog.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.model_info is not before or bool(window.last_error), timeout=TIMEOUT)
    return dialog


def test_connect_goes_on_without_the_model_list_and_says_why(qtbot, profile, tiny_folder, fresh_server):
    window = open_window(qtbot, profile, str(tiny_folder))
    model = str(Path(tiny_folder).resolve())
    dialog = connect_by_hand(qtbot, window, fresh_server, model)
    words = dialog.server_label.text()
    assert "could not list its models" in words and "empty body" in words
    assert "~/.cache/huggingface/hub" in words and "HF_HUB_CACHE" in words
    assert not window.last_error, window.last_error
    info = window.model_info
    assert info.backend == "remote" and info.server == "mlx_lm" and info.name == model
    status = window.statusBar().currentMessage()
    assert "did not list its models" in status and "HF_HUB_CACHE" in status
    type_into(qtbot, window.composer, "hello")
    window.controls.set_params(SamplingParams(max_tokens=3, top_logprobs=2))
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    assert len(window.model.thread) == 2 and window.model.thread[-1].branch.steps
    close_window(window)


def test_what_the_server_cannot_apply_is_refused_before_anything_is_added(qtbot, profile, tiny_folder, fresh_server):
    window = open_window(qtbot, profile, str(tiny_folder))
    connect_by_hand(qtbot, window, fresh_server, str(Path(tiny_folder).resolve()))
    assert window.model_info.backend == "remote", window.last_error
    controls = window.controls
    # Two values mlx_lm.server cannot apply, and DRY's kept value with DRY switched off.
    controls.set_params(
        SamplingParams(
            max_tokens=3, top_logprobs=2, temperature=0.8, typical_p=0.9, top_n_sigma=1.5, dry_multiplier=0.8
        )
    )
    editor = controls.chain
    rect = editor.list.visualItemRect(editor.list.item(editor.order().index("dry")))
    qtbot.mouseClick(editor.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.keyClick(editor.list, Qt.Key.Key_Space)  # the switch, from the keyboard
    assert "dry" not in editor.samplers() and editor.values()["dry_multiplier"] == 0.8
    assert outlined(controls) == {"typical_p", "top_n_sigma"}  # every one at once, DRY not counted
    assert "dry" not in controls.error.text()
    type_into(qtbot, window.composer, "hello")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    assert window.model.thread == [] and not window.busy()  # no unanswered turn
    assert window.composer.toPlainText() == "hello"  # the text is kept to send again
    status = window.statusBar().currentMessage()
    assert "typical_p" in status and "top_n_sigma" in status and "dry" not in status
    # Switched off, a stage's kept values are neither refused nor sent.
    for stage in ("typical_p", "top_n_sigma"):
        editor.set_stage_on(stage, False)
    assert outlined(controls) == set() and controls.error.text() == ""
    window.composer.setFocus()
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert not window.last_error, window.last_error
    (steps,) = [m.branch.steps for m in window.model.thread if m.branch is not None]
    assert steps and steps[0].params.dry_multiplier == 0.8 and "dry" not in steps[0].params.samplers
    assert set(DEFAULT_SAMPLERS) - set(steps[0].params.samplers) == {"dry", "typical_p", "top_n_sigma"}
    close_window(window)
