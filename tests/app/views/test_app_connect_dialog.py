"""The connect dialog (Models → Connect to a server…) as a new user meets it: what it
says about API keys, and what it does when the server cannot list its models."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QLabel  # noqa: E402

from app.model import keys  # noqa: E402


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
        item = combo.model().item(combo.findData(keys.KEYCHAIN))
        assert not item.isEnabled() and item.toolTip() == dialog.keychain_note
    qtbot.keyClick(combo, Qt.Key.Key_Up)
    assert combo.currentData() == keys.NONE
    assert "keychain" not in shown_words(dialog).lower() and not dialog.key_note.isVisible()
