"""``app.shell.actions.Actions``: one rule per item (the backend's capability, then the
state's ``needs``), its reason as tooltip and status tip, the item's own tips back once the
rule holds; a submenu's rule enables the menu and puts the reason on its menu action."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from dataclasses import replace  # noqa: E402

from PySide6.QtWidgets import QCheckBox, QMenu, QWidget  # noqa: E402

from app.shell.actions import Actions  # noqa: E402
from engine.api.capabilities import LOCAL_CAPABILITIES  # noqa: E402

SERVER = replace(LOCAL_CAPABILITIES, score=False, reasons=(("score", "the server cannot score a text."),))


@pytest.fixture
def parent(qtbot):
    widget = QWidget()
    qtbot.addWidget(widget)
    return widget


def test_a_rule_is_the_capability_then_the_state(parent):
    state = {"why": "Select a token first."}
    actions = Actions(parent)
    ran = []
    item = actions.add(
        "Score text…", lambda: ran.append(1), capability="score", needs=lambda: state["why"], tooltip="Score it"
    )
    # Before a model is loaded, the capability part holds: the state decides.
    assert not item.isEnabled() and item.toolTip() == "Not available: Select a token first."
    assert actions.reason(item) == "Select a token first."
    state["why"] = ""
    actions.refresh()
    assert item.isEnabled() and item.toolTip() == "Score it" and item.statusTip() == ""
    actions.apply(SERVER)  # the backend's reason comes first
    assert not item.isEnabled()
    assert item.toolTip() == item.statusTip() == "Not available: the server cannot score a text."
    actions.apply(LOCAL_CAPABILITIES)
    assert item.isEnabled() and item.toolTip() == "Score it" and actions.reason(item) == ""
    item.trigger()
    assert ran == [1]


def test_controls_submenus_and_bare_reasons(parent):
    actions = Actions(parent)
    control = QCheckBox("Compare", parent)
    control.setToolTip("Send one prompt with several settings")
    actions.bind(control, "score")
    menu = QMenu("Precision", parent)
    menu.menuAction().setToolTip("What the model computes in.")
    menu.menuAction().setStatusTip("What the model computes in.")
    server = {"on": False}
    actions.bind(menu, needs=lambda: "A server chooses." if server["on"] else "", prefix="")
    checkable = actions.add("Colour tokens", control.setChecked, checkable=True)
    assert actions.reason(checkable) == "" and checkable.isEnabled()  # no rule: always enabled
    checkable.setChecked(True)
    assert control.isChecked()  # a checkable action's slot gets the new state

    actions.apply(SERVER)
    server["on"] = True
    actions.refresh_after("any", "arguments")  # a signal's slot: its arguments are ignored
    assert not control.isEnabled() and "the server cannot score a text." in control.toolTip()
    assert not menu.isEnabled() and not menu.menuAction().isEnabled()
    assert menu.menuAction().toolTip() == menu.menuAction().statusTip() == "A server chooses."
    actions.apply(LOCAL_CAPABILITIES)
    server["on"] = False
    actions.refresh()
    assert control.isEnabled() and control.toolTip() == "Send one prompt with several settings"
    assert menu.isEnabled() and menu.menuAction().toolTip() == "What the model computes in."
    assert menu.menuAction().statusTip() == "What the model computes in."


def test_where_a_disabled_item_says_why(parent):
    actions = Actions(parent)
    why = {"now": "Open a conversation first."}
    tooltip_only = actions.add("This conversation…", print, needs=lambda: why["now"], tooltip="Export", says="tooltip")
    silent = actions.add("Delete…", print, needs=lambda: why["now"], says="nothing")
    assert not tooltip_only.isEnabled() and tooltip_only.toolTip() == "Not available: Open a conversation first."
    assert tooltip_only.statusTip() == ""
    assert not silent.isEnabled() and silent.toolTip() == "Delete" and silent.statusTip() == ""  # Qt drops the "…"
    assert actions.reason(silent) == "Open a conversation first."  # still known, only not shown
    why["now"] = ""
    actions.refresh()
    assert tooltip_only.isEnabled() and tooltip_only.toolTip() == "Export" and silent.isEnabled()
