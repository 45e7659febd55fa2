"""Sampling controls: presets, the chain editor (every stage, its order, switch and
parameters), the reply's own settings (length, candidates, seed, logit bias, stop).

Each change builds a new SamplingParams (which validates itself); a value it
rejects is outlined in red, found by the error's ``field``, with the engine's
message, and nothing is sent. Errors the engine raises later (a logit-bias id
outside the vocabulary) come back through :meth:`SamplingControls.show_error`.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from PySide6.QtCore import QSettings, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.chain_editor import ChainEditor
from app.param_fields import ERROR_STYLE, REPLY_FIELDS, SliderField, make_field
from app.param_text import format_bias, format_stop, parse_bias, parse_stop
from app.presets import BUILTIN_PRESETS, CUSTOM, apply_preset, preset_data, preset_matches
from engine.params import SamplingParams, SamplingParamsError


class SamplingControls(QWidget):
    params_changed = Signal(object)  # SamplingParams

    def __init__(self, settings: QSettings | None = None) -> None:
        super().__init__()
        self.settings = settings
        self._loading = False
        self.chain = ChainEditor()
        self.chain.changed.connect(self._changed)
        # Every numeric field by name, the chain's and the reply's, for presets and errors.
        self.fields: dict[str, SliderField] = dict(self.chain.fields)
        reply_form = QFormLayout()
        for spec in REPLY_FIELDS:
            self.fields[spec.name] = make_field(spec, self._changed)
            reply_form.addRow(spec.label, self.fields[spec.name])

        self.seed = QLineEdit()
        self.seed.setPlaceholderText("random each reply")
        self.seed.editingFinished.connect(self._changed)
        dice = QPushButton("Roll")
        dice.setToolTip("New random seed")
        dice.setFixedWidth(48)
        dice.clicked.connect(self.roll_seed)
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.seed, 1)
        seed_row.addWidget(dice)
        reply_form.addRow("Seed", seed_row)
        self.bias = QLineEdit()
        self.bias.setPlaceholderText("token_id:bias, …")
        self.bias.setToolTip("logit_bias: added to the logits first (stage bias). Empty = off.")
        self.bias.editingFinished.connect(self._changed)
        reply_form.addRow("Logit bias", self.bias)
        self.stop = QLineEdit()
        self.stop.setPlaceholderText("stop strings, separated by |  (\\n = newline)")
        self.stop.editingFinished.connect(self._changed)
        reply_form.addRow("Stop", self.stop)
        self._text_fields: dict[str, QWidget] = {"seed": self.seed, "logit_bias": self.bias, "stop": self.stop}

        self.presets = QComboBox()
        self.presets.activated.connect(lambda _: self.apply_preset(self.presets.currentText()))
        self.presets.setMinimumContentsLength(10)
        save = QPushButton("Save…")
        save.clicked.connect(self._save_preset)
        delete = QPushButton("Delete")
        delete.clicked.connect(self._delete_preset)
        preset_row = QHBoxLayout()
        preset_row.addWidget(QLabel("Preset"))
        preset_row.addWidget(self.presets, 1)
        preset_row.addWidget(save)
        preset_row.addWidget(delete)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d93025")
        self.live_note = QLabel("Changes (values and order) apply from the next token, also during a reply.")
        self.live_note.setWordWrap(True)
        self.live_note.setEnabled(False)

        chain_box = QGroupBox("Chain")
        QVBoxLayout(chain_box).addWidget(self.chain)
        reply_box = QGroupBox("Reply")
        reply_box.setLayout(reply_form)
        inner = QWidget()
        layout = QVBoxLayout(inner)
        layout.addLayout(preset_row)
        layout.addWidget(self.error)
        layout.addWidget(chain_box)
        layout.addWidget(reply_box)
        layout.addWidget(self.live_note)
        layout.addStretch(1)
        # The panel is taller than a small screen: it scrolls rather than squeezing the fields.
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        self.current = SamplingParams()
        self._refresh_presets()
        self.set_params(self.current)

    # Values --------------------------------------------------------------------------

    def read(self) -> SamplingParams:
        values: dict[str, Any] = self.chain.values()
        values.update({spec.name: self.fields[spec.name].value() for spec in REPLY_FIELDS})
        seed = self.seed.text().strip()
        if seed:
            try:
                values["seed"] = int(seed)
            except ValueError:
                raise SamplingParamsError("seed", seed, f"seed must be an integer, got {seed!r}.") from None
        values["logit_bias"] = parse_bias(self.bias.text())
        values["stop"] = parse_stop(self.stop.text())
        return SamplingParams(**values)

    def set_params(self, params: SamplingParams) -> None:
        self._loading = True
        try:
            self.chain.set_params(params)
            for spec in REPLY_FIELDS:
                self.fields[spec.name].set_value(getattr(params, spec.name))
            self.seed.setText("" if params.seed is None else str(params.seed))
            self.bias.setText(format_bias(dict(params.logit_bias)))
            self.stop.setText(format_stop(params.stop))
        finally:
            self._loading = False
        self._changed()

    def _changed(self) -> None:
        if self._loading:
            return
        try:
            params = self.read()
        except SamplingParamsError as exc:
            self.show_error(exc)
            return
        self.show_error(None)
        self._show_matching_preset(params)
        if params != self.current:
            self.current = params
            self.params_changed.emit(params)

    def show_error(self, exc: SamplingParamsError | None) -> None:
        """Outline the widget of ``exc.field`` and show the message; None clears both."""
        for widget in self._text_fields.values():
            widget.setStyleSheet("")
        for spec in REPLY_FIELDS:
            self.fields[spec.name].setStyleSheet("")
        field = getattr(exc, "field", None)
        self.chain.show_error(field)
        widget = self._text_fields.get(field) or (self.fields.get(field) if field in self._reply_names() else None)
        if widget is not None:
            widget.setStyleSheet(ERROR_STYLE)
        self.error.setText("" if exc is None else str(exc))

    def error_widget(self) -> QWidget | None:
        """The widget outlined as being at fault, if any (for tests and accessibility)."""
        candidates = [*self._text_fields.values(), *self.fields.values(), self.chain.breakers, self.chain.list]
        return next((w for w in candidates if w.styleSheet() == ERROR_STYLE), None)

    @staticmethod
    def _reply_names() -> set[str]:
        return {spec.name for spec in REPLY_FIELDS}

    def _show_matching_preset(self, params: SamplingParams) -> None:
        """Name the preset these values match, or "Custom"."""
        for name, preset in self._all_presets().items():
            if preset_matches(params, preset):
                self.presets.setCurrentText(name)
                return
        if self.presets.findText(CUSTOM) < 0:
            self.presets.insertItem(0, CUSTOM)
        self.presets.setCurrentText(CUSTOM)

    def roll_seed(self) -> None:
        self.seed.setText(str(secrets.randbits(31)))
        self._changed()

    def ban_token(self, token_id: int) -> None:
        bias = parse_bias(self.bias.text())
        bias[token_id] = -100.0
        self.bias.setText(format_bias(bias))
        self._changed()

    # Presets ---------------------------------------------------------------------------

    def _user_presets(self) -> dict[str, dict]:
        if self.settings is None:
            return {}
        raw = self.settings.value("presets", "{}")
        try:
            return json.loads(raw) if isinstance(raw, str) else {}
        except json.JSONDecodeError:
            return {}

    def _all_presets(self) -> dict[str, dict]:
        return {**BUILTIN_PRESETS, **self._user_presets()}

    def _refresh_presets(self) -> None:
        self.presets.clear()
        self.presets.addItems(list(self._all_presets()))

    def apply_preset(self, name: str) -> None:
        preset = self._all_presets().get(name)
        if preset is None:
            return
        try:
            params = apply_preset(self.current, preset)
        except (TypeError, ValueError) as exc:  # a saved preset this version cannot read
            self.error.setText(f"Preset {name!r} cannot be applied: {exc}")
            return
        self.set_params(params)
        self.presets.setCurrentText(name)

    def save_preset(self, name: str) -> None:
        presets = self._user_presets()
        presets[name] = preset_data(self.read())
        if self.settings is not None:
            self.settings.setValue("presets", json.dumps(presets))
        self._refresh_presets()
        self.presets.setCurrentText(name)

    def _save_preset(self) -> None:
        name, ok = QInputDialog.getText(self, "Save preset", "Preset name:")
        if ok and name.strip() and name.strip() not in BUILTIN_PRESETS:
            self.save_preset(name.strip())

    def _delete_preset(self) -> None:
        presets = self._user_presets()
        name = self.presets.currentText()
        if name in presets and self.settings is not None:
            del presets[name]
            self.settings.setValue("presets", json.dumps(presets))
            self._refresh_presets()
