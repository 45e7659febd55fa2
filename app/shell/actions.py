"""Actions and their one enablement rule: what the backend can do, and what the state allows.

An action (a menu item, or a control doing the same) is enabled when both parts of its rule
hold: the loaded backend declares its capability (``engine.api.capabilities.Capabilities``; the
backend's own sentence says why not), and its ``needs`` — a function of the app's state, such
as "a reply is selected" — returns ``""``. A disabled item shows why as its tooltip and status
tip. Rules are evaluated when a model loads and whenever :meth:`Actions.refresh` is called
(the window calls it on the model's events that change what the rules read), so menus only lay
the actions out and never decide enablement when they are shown.

The app never decides a capability from the backend's type or name: a new backend only has to
declare its capabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QWidget

from engine.api.capabilities import Capabilities

Needs = Callable[[], str]
"""Why the action cannot run in the app's present state; ``""`` when it can."""


Says = Literal["tips", "tooltip", "nothing"]
"""Where a disabled item says why: its tooltip and status tip, its tooltip only (the status
tip stays its own), or nowhere (it is only disabled)."""

NOT_AVAILABLE = "Not available: "
"""What a disabled item's tooltip says before the reason, unless its rule says otherwise."""


@dataclass
class _Rule:
    item: QAction | QWidget
    capability: str
    needs: Needs | None
    tooltip: str
    """The item's own tooltip, shown again once the rule holds."""
    status_tip: str
    prefix: str
    """Put before the reason in the disabled item's tips (an item whose own tip already
    names the action says the bare reason)."""
    says: Says
    label: Callable[[str], str] | None = None
    """The item's text for a reason (``""``: its own): a reason the person must see without
    hovering, in the menu item itself."""
    shown: str | None = None
    """The reason last applied to the item (None: none yet)."""


class Actions(QObject):
    """One per window: ``add`` (or ``bind``) items with their rule, ``apply`` each loaded
    model's capabilities, ``refresh`` when the state the rules read changes.

    A QObject so that a signal from another thread (a runner's ``finished``) connected to
    :meth:`refresh_after` runs the refresh on the GUI thread, after the slots connected
    before it."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self._parent = parent
        self._rules: list[_Rule] = []
        self.capabilities: Capabilities | None = None
        """The last applied; None before a model is loaded (capability parts then hold: the
        item's own handler says the model is still loading)."""

    def add(
        self,
        text: str,
        slot: Callable[..., object],
        *,
        capability: str = "",
        needs: Needs | None = None,
        shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None,
        tooltip: str = "",
        status_tip: str = "",
        checkable: bool = False,
        prefix: str = NOT_AVAILABLE,
        says: Says = "tips",
        label: Callable[[str], str] | None = None,
    ) -> QAction:
        """A new action calling ``slot`` when triggered (a checkable one: when toggled, with
        the new state), under the rule given."""
        action = QAction(text, self._parent, checkable=checkable)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        if tooltip:
            action.setToolTip(tooltip)
        if status_tip:
            action.setStatusTip(status_tip)
        if checkable:
            action.toggled.connect(slot)
        else:
            action.triggered.connect(lambda _=False: slot())
        if capability or needs is not None:
            self.bind(action, capability, needs, prefix=prefix, says=says, label=label)
        return action

    def bind(
        self,
        item: QAction | QWidget,
        capability: str = "",
        needs: Needs | None = None,
        *,
        prefix: str = NOT_AVAILABLE,
        says: Says = "tips",
        label: Callable[[str], str] | None = None,
    ) -> None:
        """Put an existing item (a panel's control doing an action's job too, a submenu)
        under a rule; ``label``: the action's text for a reason (``""``: its own)."""
        tips = item.menuAction() if isinstance(item, QMenu) else item
        rule = _Rule(item, capability, needs, tips.toolTip(), tips.statusTip(), prefix, says)
        if label is not None and isinstance(item, QAction):
            own = item.text()
            rule.label = lambda why: label(why) or own
        self._rules.append(rule)
        self._apply_one(self._rules[-1])

    def apply(self, capabilities: Capabilities) -> None:
        """A model was loaded: its backend's capabilities."""
        self.capabilities = capabilities
        self.refresh()

    def refresh(self) -> None:
        for rule in self._rules:
            self._apply_one(rule)

    def refresh_after(self, *_args: object) -> None:
        """:meth:`refresh`, as a slot any signal can be connected to (its arguments ignored)."""
        self.refresh()

    def reason(self, item: QAction | QWidget) -> str:
        """Why ``item`` is disabled now (``""`` when it is enabled or not bound)."""
        for rule in self._rules:
            if rule.item is item:
                return self._why(rule)
        return ""

    def _why(self, rule: _Rule) -> str:
        if rule.capability and self.capabilities is not None and (why := self.capabilities.reason(rule.capability)):
            return why
        return rule.needs() if rule.needs is not None else ""

    def _apply_one(self, rule: _Rule) -> None:
        why = self._why(rule)
        # A refresh comes with every token of a reply followed (the selection moves): Qt is
        # told only what changed, so a rule that still says the same costs its test alone.
        if why == rule.shown and rule.item.isEnabled() == (not why):
            return
        rule.shown = why
        rule.item.setEnabled(not why)  # a submenu's own action follows its menu
        # Qt strips the action's text into an empty tooltip; keep the item's own when enabled.
        tips = rule.item.menuAction() if isinstance(rule.item, QMenu) else rule.item
        said = f"{rule.prefix}{why}" if why and rule.says != "nothing" else ""
        tips.setToolTip(said or rule.tooltip)
        tips.setStatusTip(said if said and rule.says == "tips" else rule.status_tip)
        if rule.label is not None and isinstance(rule.item, QAction):
            rule.item.setText(rule.label(why))
