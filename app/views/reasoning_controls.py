"""The Sampling dock's reasoning row: the settings of a reasoning model's answer, its
thinking budget, and the chat template's enable-thinking switch.

- *Different settings for the answer* shows two tabs over the panel, Thinking and Answer:
  the Answer tab is a second full set of the panel's fields (validated as the first), sent
  as the engine's ``think_variant``: those settings apply from the token after the end of
  the thinking, as a live change would.
- *Thinking budget* (off, or N tokens): the engine ends the thinking after N thinking tokens
  by forcing the end marker (``SamplingParams.thinking_budget``).
- *Thinking* is the chat template's ``enable_thinking``, shown only where the loaded
  model's template has the switch (``ModelInfo.thinking_switch``).

The first two show only for a model with reasoning markers (``ModelInfo.reasoning``), the
row only where something in it applies.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QTabBar, QVBoxLayout, QWidget

from app.views.fitting import WrapRow
from app.views.param_fields import ClampingSpinBox
from app.views.wheel_guard import wheel_only_when_focused
from engine.api.params import SamplingParams

BUDGET_MAX = 1_000_000
THINKING_TAB, ANSWER_TAB = 0, 1
ANSWER_TIP = (
    "A reasoning model's answer with settings of its own: they apply from the token after the "
    "end of the thinking, exactly as a live change does (the penalty window and DRY carry over)."
)
BUDGET_TIP = "End the thinking after this many thinking tokens by writing the end marker (</think>). 0 = off."
SERVER_TIP = (
    "A server samples a whole reply with one setting and chooses every token: other settings "
    "for the answer and a thinking budget work with a local model only."
)
SWITCH_TIP = "The chat template's enable_thinking: off, the template closes the thinking before the reply starts."


class ReasoningRow(QWidget):
    changed = Signal()  # the answer switch or the budget changed
    thinking_switched = Signal(object)  # enable_thinking for the next prompts: True / False

    def __init__(self) -> None:
        super().__init__()
        self.answer_switch = QCheckBox("Different settings\nfor the answer")  # two lines: the dock is narrow
        self.answer_switch.setToolTip(ANSWER_TIP)
        self.budget = ClampingSpinBox()
        self.budget.setRange(0, BUDGET_MAX)
        self.budget.setSpecialValueText("off")
        self.budget.setSuffix(" tokens")
        self.budget.setToolTip(BUDGET_TIP)
        wheel_only_when_focused(self.budget)
        budget_label = QLabel("Thinking budget")
        budget_label.setToolTip(BUDGET_TIP)
        self.think_toggle = QCheckBox("Thinking")
        self.think_toggle.setChecked(True)
        self.think_toggle.setToolTip(SWITCH_TIP)
        self.think_toggle.hide()  # until a model whose template has the switch is loaded
        self.phase_tabs = QTabBar()
        self.phase_tabs.setExpanding(False)
        self.phase_tabs.addTab("Thinking")
        self.phase_tabs.addTab("Answer")
        self.phase_tabs.setTabToolTip(THINKING_TAB, "The settings of the thinking (and of a model that does not think)")
        self.phase_tabs.setTabToolTip(ANSWER_TAB, ANSWER_TIP)
        self.phase_tabs.hide()
        self.answer_switch.toggled.connect(self._on_switch)
        self.budget.valueChanged.connect(lambda _v: self.changed.emit())
        self.think_toggle.toggled.connect(lambda on: self.thinking_switched.emit(on))
        row = QHBoxLayout()
        row.setContentsMargins(6, 0, 6, 0)
        row.addWidget(WrapRow([(budget_label, 0), (self.budget, 1), (self.think_toggle, 0)]))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        switch_row = QHBoxLayout()
        switch_row.setContentsMargins(6, 0, 6, 0)
        switch_row.addWidget(self.answer_switch)
        layout.addLayout(switch_row)
        layout.addLayout(row)
        layout.addWidget(self.phase_tabs)
        self.thinks = False  # until a model with reasoning markers is loaded (set_model)
        self.budget_row = [budget_label, self.budget]
        self.set_model(thinks=False, has_switch=False)

    def _on_switch(self, on: bool) -> None:
        self.phase_tabs.setVisible(on and self.thinks)
        if not on:
            self.phase_tabs.setCurrentIndex(THINKING_TAB)
        self.changed.emit()

    def answer_shown(self) -> bool:
        """Whether the Answer tab is the one in view."""
        return self.thinks and self.answer_switch.isChecked() and self.phase_tabs.currentIndex() == ANSWER_TAB

    def budget_value(self) -> int | None:
        return self.budget.value() or None

    def values(self, answer: SamplingParams) -> dict[str, Any]:
        """The fields this row adds to every setting sent: ``thinking_budget`` and
        ``think_variant`` (``answer`` when the switch is on)."""
        if not self.answer_switch.isEnabled() or not self.thinks:  # a server, or a model that does not think
            return {"thinking_budget": None, "think_variant": None}
        return {
            "thinking_budget": self.budget_value(),
            "think_variant": answer if self.answer_switch.isChecked() else None,
        }

    def show_values(self, params: SamplingParams) -> bool:
        """Show what ``params`` carries (restored or set by hand); True when it changed the row."""
        before = (self.budget.value(), self.answer_switch.isChecked())
        self.blockSignals(True)
        try:
            self.budget.setValue(params.thinking_budget or 0)
            self.answer_switch.setChecked(params.think_variant is not None)
        finally:
            self.blockSignals(False)
        return before != (self.budget.value(), self.answer_switch.isChecked())

    def set_server(self, server: str) -> None:
        """A server ("" = the local engine) samples a whole reply with one setting and chooses
        every token: the answer's settings and the budget are off, and say why."""
        for widget, tip in ((self.answer_switch, ANSWER_TIP), (self.budget, BUDGET_TIP)):
            widget.setEnabled(not server)
            widget.setToolTip(tip if not server else SERVER_TIP)
        if server:
            self.phase_tabs.setCurrentIndex(THINKING_TAB)
        self.phase_tabs.setEnabled(not server)

    def set_model(self, thinks: bool, has_switch: bool) -> None:
        """The loaded model: whether it has reasoning markers (``thinks``: the answer's settings
        and the budget apply) and whether its template has ``enable_thinking``. What does not
        apply is hidden, and the row with it where nothing does: it sat at the top of the
        Sampling dock for every model; its values are kept for the next thinking model."""
        self.thinks = thinks
        self.answer_switch.setVisible(thinks)
        for widget in self.budget_row:
            widget.setVisible(thinks)
        self.phase_tabs.setVisible(thinks and self.answer_switch.isChecked())
        if not thinks:
            self.phase_tabs.setCurrentIndex(THINKING_TAB)
        self.think_toggle.setVisible(has_switch)
        self.setVisible(thinks or has_switch)
