"""The Sampling dock: the settings of the next reply, or 2–4 settings to compare.

Tab A is the main panel (``SamplingControls``: presets, the chain editor, the reply's
own settings); ticking *Compare* shows tabs B, C, D, each a full panel of its own, and
Send then answers one prompt with every shown variant side by side (one prefill). A
change on tab k applies from the next token to column k of the runs being written (tab A
also to single replies). The variants are kept in the settings between sessions.
"""

from __future__ import annotations

import contextlib
import json

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QStackedWidget, QTabBar, QVBoxLayout, QWidget

from app.model.generation import MAX_VARIANTS, MIN_VARIANTS, Variant
from app.model.presets import CUSTOM, short_label
from app.store.compare_runs import COLUMN_NAMES
from app.views.controls import SamplingControls
from app.views.fitting import WrapRow
from app.views.param_fields import ClampingSpinBox
from app.views.reasoning_controls import ANSWER_TAB, ReasoningRow
from app.views.theme import LIGHT, Colors, variant_color
from app.views.wheel_guard import wheel_only_when_focused
from engine.api.params import SamplingParams

DEFAULT_VARIANTS = ("Greedy", "Balanced", "Creative", "DRY + XTC")
TAB_TEXT_PX = 110
"""A compare tab's text after its column letter, at most (four tabs fit a narrow dock's bar)."""
ANSWER_MAX_TOKENS_TIP = (
    "The limit of the whole reply, thinking and answer together: set it on the Thinking tab (the answer keeps it)."
)


class SamplingPanel(QWidget):
    params_changed = Signal(int, object)  # variant (0 = the main settings), SamplingParams
    variants_changed = Signal()  # the compare switch, the count or a label changed
    thinking_switched = Signal(object)  # the chat template's enable_thinking: True / False

    def __init__(self, settings: QSettings | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.colors: Colors = LIGHT
        self.compare = QCheckBox("Compare")
        self.compare.setToolTip("Send one prompt with 2–4 settings: the replies stream side by side (one prefill).")
        self.count = ClampingSpinBox()
        self.count.setRange(MIN_VARIANTS, MAX_VARIANTS)
        self.count.setValue(3)
        self.count.setSuffix(" settings")
        self.count.setToolTip("How many settings to compare")
        wheel_only_when_focused(self.count)
        self.tabs = QTabBar()
        self.tabs.setExpanding(False)
        self.stack = QStackedWidget()
        self.variant_controls: list[SamplingControls] = []
        for i in range(MAX_VARIANTS):
            controls = SamplingControls(settings)
            if i > 0:
                controls.apply_preset(DEFAULT_VARIANTS[i])
            controls.params_changed.connect(lambda params, k=i: self._on_params(k, params))
            self.variant_controls.append(controls)
            self.stack.addWidget(controls)
            self.tabs.addTab("")
        # A reasoning model's answer: a second set of the same fields.
        self.reasoning = ReasoningRow()
        self.answer_controls = SamplingControls(settings)
        # The reply's length is one limit, the Thinking tab's: the engine keeps it for the answer.
        self.answer_controls.fields["max_tokens"].setEnabled(False)
        self.answer_controls.fields["max_tokens"].setToolTip(ANSWER_MAX_TOKENS_TIP)
        self.answer_controls.params_changed.connect(lambda _params: self._push_reasoning())
        self.stack.addWidget(self.answer_controls)
        self.reasoning.answer_switch.toggled.connect(self._on_answer_switch)
        self.reasoning.changed.connect(self._push_reasoning)
        self.reasoning.changed.connect(self._show_page)
        self.reasoning.phase_tabs.currentChanged.connect(self._show_page)
        self.reasoning.thinking_switched.connect(self.thinking_switched)
        self.tabs.currentChanged.connect(self._show_page)
        self.compare.toggled.connect(self._on_mode)
        self.count.valueChanged.connect(self._on_mode)
        top = QHBoxLayout()  # the switch and the count one under the other in a narrow dock
        top.setContentsMargins(6, 4, 6, 0)
        top.addWidget(WrapRow([(self.compare, 0), (self.count, 0)]))
        top.addStretch(1)
        self.hint = QLabel("Each tab is one column; a change applies to its column from the next token.")
        self.hint.setWordWrap(True)
        self.hint.setEnabled(False)
        self.hint.setContentsMargins(6, 0, 6, 0)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.reasoning)
        layout.addWidget(self.tabs)
        layout.addWidget(self.hint)
        layout.addWidget(self.stack, 1)
        self._restore()
        self._on_mode()

    @property
    def controls(self) -> SamplingControls:
        """The main settings (tab A): single replies use these."""
        return self.variant_controls[0]

    def compare_on(self) -> bool:
        return self.compare.isChecked()

    def set_compare(self, on: bool, count: int | None = None) -> None:
        if count is not None:
            self.count.setValue(count)
        self.compare.setChecked(on)

    def label(self, i: int) -> str:
        controls = self.variant_controls[i]
        name = controls.presets.currentText()
        return name if name and name != CUSTOM else short_label(controls.current)

    def variants(self) -> list[Variant]:
        """The settings to compare: (label, parameters) per shown tab."""
        return [(self.label(i), self.variant_controls[i].current) for i in range(self.count.value())]

    def set_vocab_size(self, vocab_size: int) -> None:
        """The loaded model's vocabulary size (0 = not known), for every tab's logit-bias ids."""
        for controls in (*self.variant_controls, self.answer_controls):
            controls.set_vocab_size(vocab_size)

    def set_server(self, server: str) -> None:
        """The kind of the server in use ("" = local), for every tab: what it cannot apply is refused."""
        self.reasoning.set_server(server)
        self._push_reasoning()
        for controls in (*self.variant_controls, self.answer_controls):
            controls.set_server(server)

    def send_problem(self) -> str:
        """Why Send must be refused ("" when it need not): the shown tabs' invalid values,
        each outlined; the first tab at fault is brought forward."""
        shown = range(self.count.value()) if self.compare_on() else range(1)
        faults = [(i, problem) for i in shown if (problem := self.variant_controls[i].send_problem())]
        switch = self.reasoning.answer_switch
        if switch.isChecked() and switch.isEnabled() and (problem := self.answer_controls.send_problem()):
            self.reasoning.phase_tabs.setCurrentIndex(ANSWER_TAB)
            return "Not sent — fix the settings outlined in red. The answer's settings: " + problem.replace("\n", " ")
        if not faults:
            return ""
        if self.compare_on():
            self.tabs.setCurrentIndex(faults[0][0])
            named = " ".join(f"Setting {COLUMN_NAMES[i]}: {problem}" for i, problem in faults)
        else:
            named = faults[0][1]
        return "Not sent — fix the settings outlined in red. " + named.replace("\n", " ")

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self._refresh_tabs()

    def _on_params(self, i: int, params: SamplingParams) -> None:
        # Set by hand or restored: the row follows (not for a server: the row keeps its values).
        if i == 0 and self.reasoning.answer_switch.isEnabled() and self.reasoning.show_values(params):
            if params.think_variant is not None:
                self.answer_controls.set_params(params.think_variant)
            self._push_reasoning()
        if i == 0:  # shown as the answer keeps it (SamplingParams.answer_settings)
            self.answer_controls.fields["max_tokens"].set_value(params.max_tokens)
        self._refresh_tabs()
        self.params_changed.emit(i, params)

    def _on_answer_switch(self, on: bool) -> None:
        """The Answer tab starts as a copy of the thinking's settings, to change from there."""
        if on and self.answer_controls.current == SamplingParams():
            self.answer_controls.set_params(
                self.controls.current.with_changes(think_variant=None, thinking_budget=None)
            )

    def _push_reasoning(self) -> None:
        """The budget and the answer's settings go with every setting sent (each tab)."""
        values = self.reasoning.values(self.answer_controls.current)
        for controls in self.variant_controls:
            controls.set_reasoning(values)

    def _show_page(self, *_args) -> None:
        """The Answer tab shows the answer's fields; else the compare tab in view."""
        if self.reasoning.answer_shown():
            self.stack.setCurrentWidget(self.answer_controls)
        else:
            self.stack.setCurrentIndex(self.tabs.currentIndex())

    def set_reasoning(self, thinks: bool, has_switch: bool) -> None:
        """The loaded model: whether it thinks (reasoning markers: the answer's settings and the
        budget show) and whether its chat template has ``enable_thinking`` (the toggle shows)."""
        self.reasoning.set_model(thinks, has_switch)
        self._push_reasoning()
        self._show_page()

    def _on_mode(self, *_args) -> None:
        on = self.compare.isChecked()
        self.count.setEnabled(on)
        self.tabs.setVisible(on)
        self.hint.setVisible(on)
        if not on or self.tabs.currentIndex() >= self.count.value():
            self.tabs.setCurrentIndex(0)
        self._refresh_tabs()
        self.variants_changed.emit()

    def _refresh_tabs(self) -> None:
        # A tab names what sets its settings apart from the other tabs', elided to TAB_TEXT_PX
        # (a tab's label was once its whole settings string, and one tab filled the bar);
        # its tooltip has them whole.
        shown = range(self.count.value())
        parts = {i: self.label(i).split(", ") for i in shown}
        common = set.intersection(*(set(p) for p in parts.values())) if parts else set()
        metrics = self.tabs.fontMetrics()
        for i in range(MAX_VARIANTS):
            self.tabs.setTabVisible(i, i < self.count.value())
            own = [part for part in parts.get(i, [self.label(i)]) if part not in common] or parts.get(i, [""])[:1]
            text = metrics.elidedText(", ".join(own), Qt.TextElideMode.ElideRight, TAB_TEXT_PX)
            self.tabs.setTabText(i, f"{COLUMN_NAMES[i]} · {text}")
            self.tabs.setTabTextColor(i, QColor(variant_color(i, self.colors)))
            whole, label = short_label(self.variant_controls[i].current), self.label(i)
            self.tabs.setTabToolTip(i, f"Column {COLUMN_NAMES[i]}: {label}" + (f" ({whole})" if whole != label else ""))

    # Settings ---------------------------------------------------------------------------------

    def _restore(self) -> None:
        if self.settings is None:
            return
        raw = self.settings.value("compare_variants")
        if isinstance(raw, str):
            with contextlib.suppress(ValueError, TypeError):
                for controls, data in zip(self.variant_controls[1:], json.loads(raw), strict=False):
                    controls.set_params(SamplingParams.from_dict(data))
        with contextlib.suppress(ValueError, TypeError):
            self.count.setValue(int(self.settings.value("compare_count", 3)))
        self.compare.setChecked(self.settings.value("compare", "false") == "true")

    def save(self) -> None:
        if self.settings is None:
            return
        variants = [c.current.to_dict() for c in self.variant_controls[1:]]
        self.settings.setValue("compare_variants", json.dumps(variants))
        self.settings.setValue("compare_count", self.count.value())
        self.settings.setValue("compare", "true" if self.compare.isChecked() else "false")
