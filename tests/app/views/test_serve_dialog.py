"""Server → Start serving…'s dialog: this machine by default; another address warns and
needs an API key before Start can be pressed."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")


def test_another_address_needs_a_key(qtbot):
    from app.views.serve_dialog import ServeChoice, ServeDialog

    dialog = ServeDialog("tiny-llama")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.choice() == ServeChoice("127.0.0.1", 8080, None)
    assert dialog.start.isEnabled() and not dialog.warning.isVisible()
    dialog.host.setText("0.0.0.0")
    assert not dialog.start.isEnabled() and dialog.warning.isVisible()
    assert "give an API key" in dialog.start.toolTip()
    dialog.key.setText("s3cret")
    assert dialog.start.isEnabled() and dialog.choice() == ServeChoice("0.0.0.0", 8080, "s3cret")
    dialog.host.setText("")
    assert not dialog.start.isEnabled()
    dialog.host.setText("::1")  # a loopback address: this machine only, no key asked
    dialog.key.setText("")
    assert dialog.start.isEnabled() and not dialog.warning.isVisible()
