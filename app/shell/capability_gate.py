"""Menu items and controls a backend may not do, enabled from what the backend declares.

Each item is bound to one name of ``engine.api.capabilities.Capabilities``; when a model is
loaded (local or on a server) the item is enabled if its backend can do it, else disabled
with the backend's own reason as its tooltip and status tip. The app never decides this
from the backend's type or name: a new backend only has to declare its capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

from engine.api.capabilities import Capabilities


@dataclass
class _Bound:
    item: QAction | QWidget
    name: str
    tooltip: str
    """The item's own tooltip, shown again once the capability is back."""


class CapabilityGate:
    """One per window: ``bind`` items, then ``apply`` each loaded model's capabilities."""

    def __init__(self) -> None:
        self._bound: list[_Bound] = []
        self.capabilities: Capabilities | None = None
        """The last applied; None before a model is loaded (every item stays enabled: its
        own handler says the model is still loading)."""

    def bind(self, item: QAction | QWidget, name: str) -> None:
        self._bound.append(_Bound(item, name, item.toolTip()))
        if self.capabilities is not None:
            self._apply_one(self._bound[-1], self.capabilities)

    def apply(self, capabilities: Capabilities) -> None:
        self.capabilities = capabilities
        for bound in self._bound:
            self._apply_one(bound, capabilities)

    def apply_info(self, info) -> None:
        """A worker's ``model_loaded`` (an ``engine.api.backend.ModelInfo``)."""
        self.apply(info.capabilities)

    @staticmethod
    def _apply_one(bound: _Bound, capabilities: Capabilities) -> None:
        why = capabilities.reason(bound.name)
        bound.item.setEnabled(not why)
        # Qt strips the action's text into an empty tooltip; keep the item's own when enabled.
        tip = f"Not available: {why}" if why else bound.tooltip
        bound.item.setToolTip(tip)
        bound.item.setStatusTip(tip if why else "")

    def reason(self, item: QAction | QWidget) -> str:
        """Why ``item`` is disabled now (``""`` when it is enabled or not bound)."""
        for bound in self._bound:
            if bound.item is item and self.capabilities is not None:
                return self.capabilities.reason(bound.name)
        return ""
