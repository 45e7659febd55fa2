"""The connect dialog (Models → Connect to a server…) as a new user meets it: what it
says about API keys, and what it does when the server cannot list its models."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QLabel  # noqa: E402

from app.model import keys  # noqa: E402
from app.views.connect_dialog import item_enabled  # noqa: E402
from tests.support.app_window import TIMEOUT  # noqa: E402


@pytest.fixture
def dialog(qtbot, tmp_path):
    from app.views.connect_dialog import ConnectDialog

    widget = ConnectDialog(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def shown_words(dialog) -> str:
    """Every sentence the dialog shows now."""
    return " ".join(label.text() for label in dialog.findChildren(QLabel) if label.isVisible())


def test_the_keychain_sentence_shows_only_when_a_key_is_used(qtbot, dialog):
    combo = dialog.key_kind
    assert combo.currentData() == keys.NONE
    assert "keychain" not in shown_words(dialog).lower()  # no key: nothing about keychains
    combo.setFocus()
    qtbot.keyClick(combo, Qt.Key.Key_Down)
    assert combo.currentData() == keys.ENV
    assert "read from this variable" in shown_words(dialog)
    assert "keychain" not in shown_words(dialog).lower()
    if dialog.keychain_ok:
        qtbot.keyClick(combo, Qt.Key.Key_Down)
        assert combo.currentData() == keys.KEYCHAIN
        assert dialog.keychain_note in shown_words(dialog)
        qtbot.keyClick(combo, Qt.Key.Key_Up)
    else:  # the reason stays where the greyed choice is
        index = combo.findData(keys.KEYCHAIN)
        assert not item_enabled(combo, index)
        assert combo.itemData(index, Qt.ItemDataRole.ToolTipRole) == dialog.keychain_note
    qtbot.keyClick(combo, Qt.Key.Key_Up)
    assert combo.currentData() == keys.NONE
    assert "keychain" not in shown_words(dialog).lower() and not dialog.key_note.isVisible()


def _fully_shown(label: QLabel) -> bool:
    """Every wrapped line of ``label`` fits in the height it was given, inside the dialog."""
    bottom = label.mapTo(label.window(), label.rect().bottomLeft()).y()
    return label.height() >= label.heightForWidth(label.width()) and bottom <= label.window().height()


def test_the_models_advice_is_readable_the_server_said_what_it_can_do_and_the_model_is_remembered(qtbot, tmp_path):
    """A hand-built listing (not a server) of the kind mlx_lm.server gives on a fresh home, no
    models and the hub-cache hint (the real server's answer is checked in
    tests/integration/test_app_remote_fresh_home.py): the advice is the longest sentence the
    dialog shows, and it was cut after its second line; the model typed was forgotten."""
    from app.views.connect_dialog import ConnectDialog
    from engine.remote.abilities import abilities
    from engine.remote.listing import HUB_CACHE_HINT, ServerListing

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    listing = ServerListing("mlx_lm", [], f"its /v1/models answer is empty; {HUB_CACHE_HINT}")
    dialog = ConnectDialog(settings, probe=lambda url, **options: listing)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    qtbot.mouseClick(dialog.list_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: HUB_CACHE_HINT in dialog.server_label.text() and not dialog.probing)
    # Laid out: the label's wrapped lines fit once the dialog has taken the new text in (a
    # cut label never fits, and fails after the wait's guard).
    qtbot.waitUntil(lambda: _fully_shown(dialog.server_label), timeout=TIMEOUT)
    # What the server can and cannot do, from its kind's own data, before any reply.
    assert dialog.abilities.isVisible() and _fully_shown(dialog.abilities)
    for sentence in abilities("mlx_lm"):
        assert sentence in dialog.abilities.text()
    assert "no logprobs" in dialog.abilities.text() and "cannot continue" in dialog.abilities.text()
    model = "/models/SmolLM2-135M-Instruct"
    qtbot.keyClicks(dialog.model.lineEdit(), model)
    qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Ok), Qt.MouseButton.LeftButton)
    again = ConnectDialog(settings, probe=lambda url, **options: listing)
    qtbot.addWidget(again)
    assert again.model.currentText() == model  # offered again next time
    qtbot.mouseClick(again.list_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not again.probing)
    assert again.model.currentText() == model  # a listing without models keeps it
