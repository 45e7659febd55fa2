"""Sampling controls: every SamplingParams field, presets, and a seed with a dice button.

Each change builds a new SamplingParams (which validates itself); a value it
rejects is outlined in red with the engine's message, and nothing is sent.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.params import (
    FREQUENCY_PENALTY_RANGE,
    MAX_TOKENS_RANGE,
    MIN_P_RANGE,
    PENALTY_WINDOW_RANGE,
    PRESENCE_PENALTY_RANGE,
    REPETITION_PENALTY_RANGE,
    TEMPERATURE_RANGE,
    TOP_K_RANGE,
    TOP_LOGPROBS_RANGE,
    TOP_P_RANGE,
    SamplingParams,
    SamplingParamsError,
)

BUILTIN_PRESETS: dict[str, dict] = {
    "Greedy": {
        "temperature": 0.0,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    },
    "Balanced": {
        "temperature": 0.7,
        "top_k": 40,
        "top_p": 0.9,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    },
    "Creative": {
        "temperature": 1.1,
        "top_k": 0,
        "top_p": 0.98,
        "min_p": 0.02,
        "repetition_penalty": 1.05,
        "presence_penalty": 0.3,
        "frequency_penalty": 0.2,
    },
}
CUSTOM = "Custom"
# The fields with a slider, in the order the panel shows them; presets set these.
SLIDER_FIELDS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "penalty_window",
    "max_tokens",
    "top_logprobs",
)
ERROR_STYLE = "border: 2px solid #d93025;"

# name, label, (slider min, slider max), spin range, decimals, tooltip
FLOAT_FIELDS = [
    ("temperature", "Temperature", (0.0, 2.0), TEMPERATURE_RANGE, 2, "0 = greedy"),
    ("top_p", "Top-p", (0.01, 1.0), (0.01, TOP_P_RANGE[1]), 3, "1 = off"),
    ("min_p", "Min-p", (0.0, 0.5), MIN_P_RANGE, 3, "0 = off"),
    (
        "repetition_penalty",
        "Repetition penalty",
        (0.5, 2.0),
        (0.01, REPETITION_PENALTY_RANGE[1]),
        3,
        "1 = off",
    ),
    ("presence_penalty", "Presence penalty", (-2.0, 2.0), PRESENCE_PENALTY_RANGE, 2, "0 = off"),
    ("frequency_penalty", "Frequency penalty", (-2.0, 2.0), FREQUENCY_PENALTY_RANGE, 2, "0 = off"),
]
INT_FIELDS = [
    ("top_k", "Top-k", (0, 200), TOP_K_RANGE, "0 = off"),
    (
        "penalty_window",
        "Penalty window",
        (0, 1024),
        PENALTY_WINDOW_RANGE,
        "tokens counted; 0 = all",
    ),
    ("max_tokens", "Max tokens", (1, 2048), MAX_TOKENS_RANGE, ""),
    ("top_logprobs", "Candidates shown", (0, 100), TOP_LOGPROBS_RANGE, "top N of raw and of final"),
]
SLIDER_STEPS = 1000


class SliderField(QWidget):
    """A slider (over a convenient range) and a spin box (over the whole valid range)."""

    def __init__(self, spin, slider_range, on_change: Callable[[], None]):
        super().__init__()
        self.lo, self.hi = slider_range
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, SLIDER_STEPS)
        self.spin = spin
        self.spin.setKeyboardTracking(False)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.spin)
        self.slider.valueChanged.connect(self._from_slider)
        self.spin.valueChanged.connect(self._from_spin)
        self._on_change = on_change

    def value(self):
        return self.spin.value()

    def set_value(self, value) -> None:
        self.spin.blockSignals(True)
        self.spin.setValue(value)
        self.spin.blockSignals(False)
        self._sync_slider(value)

    def _sync_slider(self, value) -> None:
        self.slider.blockSignals(True)
        fraction = (min(max(value, self.lo), self.hi) - self.lo) / (self.hi - self.lo)
        self.slider.setValue(round(fraction * SLIDER_STEPS))
        self.slider.blockSignals(False)

    def _slider_value(self, position: int):
        return self.lo + (self.hi - self.lo) * position / SLIDER_STEPS

    def _from_slider(self, position: int) -> None:
        self.spin.blockSignals(True)
        self.spin.setValue(self._slider_value(position))
        self.spin.blockSignals(False)
        self._on_change()

    def _from_spin(self, value) -> None:
        self._sync_slider(value)
        self._on_change()


class FloatField(SliderField):
    def __init__(self, slider_range, spin_range, decimals: int, on_change: Callable[[], None]):
        spin = QDoubleSpinBox()
        spin.setRange(*spin_range)
        spin.setDecimals(decimals)
        spin.setSingleStep(10 ** -min(decimals, 2))
        super().__init__(spin, slider_range, on_change)


class IntField(SliderField):
    def __init__(self, slider_range, spin_range, on_change: Callable[[], None]):
        spin = QSpinBox()
        spin.setRange(int(spin_range[0]), min(int(spin_range[1]), 2**31 - 1))  # QSpinBox holds int32
        super().__init__(spin, slider_range, on_change)

    def _slider_value(self, position: int) -> int:
        return round(super()._slider_value(position))


def parse_bias(text: str) -> dict[int, float]:
    """``"42:-100, 7:2.5"`` -> {42: -100.0, 7: 2.5}."""
    bias: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in text.replace(";", ",").split(","))):
        token, _, value = part.partition(":")
        try:
            bias[int(token)] = float(value)
        except ValueError:
            raise SamplingParamsError(
                "logit_bias", part, f"logit_bias entries are token_id:bias, got {part!r}."
            ) from None
    return bias


def format_bias(bias: dict[int, float]) -> str:
    return ", ".join(f"{k}:{v:g}" for k, v in bias.items())


def parse_stop(text: str) -> tuple[str, ...]:
    """Stop strings separated by ``|``; ``\\n`` and ``\\t`` are escapes."""
    parts = [p.replace("\\n", "\n").replace("\\t", "\t") for p in text.split("|")]
    return tuple(p for p in parts if p)


def format_stop(stop: tuple[str, ...]) -> str:
    return "|".join(s.replace("\n", "\\n").replace("\t", "\\t") for s in stop)


class SamplingControls(QWidget):
    params_changed = Signal(object)  # SamplingParams

    def __init__(self, settings: QSettings | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.fields: dict[str, SliderField] = {}
        self._loading = False
        for name, _, slider, spin, decimals, tip in FLOAT_FIELDS:
            self.fields[name] = FloatField(slider, spin, decimals, self._changed)
            self.fields[name].setToolTip(tip)
        for name, _, slider, spin, tip in INT_FIELDS:
            self.fields[name] = IntField(slider, spin, self._changed)
            self.fields[name].setToolTip(tip)
        form = QFormLayout()
        labels = {f[0]: f[1] for f in FLOAT_FIELDS} | {f[0]: f[1] for f in INT_FIELDS}
        for name in SLIDER_FIELDS:
            form.addRow(labels[name], self.fields[name])

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
        form.addRow("Seed", seed_row)
        self.bias = QLineEdit()
        self.bias.setPlaceholderText("token_id:bias, …")
        self.bias.editingFinished.connect(self._changed)
        form.addRow("Logit bias", self.bias)
        self.stop = QLineEdit()
        self.stop.setPlaceholderText("stop strings, separated by |  (\\n = newline)")
        self.stop.editingFinished.connect(self._changed)
        form.addRow("Stop", self.stop)
        self._text_fields = {"seed": self.seed, "logit_bias": self.bias, "stop": self.stop}

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
        self.live_note = QLabel("Changes apply from the next token, also during a reply.")
        self.live_note.setWordWrap(True)
        self.live_note.setEnabled(False)

        layout = QVBoxLayout(self)
        layout.addLayout(preset_row)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(self.live_note)
        layout.addStretch(1)
        self.current = SamplingParams()
        self._refresh_presets()
        self.set_params(self.current)

    # Values --------------------------------------------------------------------------

    def read(self) -> SamplingParams:
        values = {name: field.value() for name, field in self.fields.items()}
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
        for name, field in self.fields.items():
            field.set_value(getattr(params, name))
        self.seed.setText("" if params.seed is None else str(params.seed))
        self.bias.setText(format_bias(dict(params.logit_bias)))
        self.stop.setText(format_stop(params.stop))
        self._loading = False
        self._changed()

    def _changed(self) -> None:
        if self._loading:
            return
        for widget in [*self.fields.values(), *self._text_fields.values()]:
            widget.setStyleSheet("")
        try:
            params = self.read()
        except SamplingParamsError as exc:
            widget = self.fields.get(exc.field) or self._text_fields.get(exc.field)
            if widget is not None:
                widget.setStyleSheet(ERROR_STYLE)
            self.error.setText(str(exc))
            return
        self.error.setText("")
        self._show_matching_preset(params)
        if params != self.current:
            self.current = params
            self.params_changed.emit(params)

    def _show_matching_preset(self, params: SamplingParams) -> None:
        """Name the preset these values match, or "Custom"."""
        presets = {**BUILTIN_PRESETS, **self._user_presets()}
        for name, preset in presets.items():
            if all(getattr(params, k) == v for k, v in preset.items() if k in SLIDER_FIELDS):
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

    def _refresh_presets(self) -> None:
        self.presets.clear()
        self.presets.addItems([*BUILTIN_PRESETS, *self._user_presets()])

    def apply_preset(self, name: str) -> None:
        preset = BUILTIN_PRESETS.get(name) or self._user_presets().get(name)
        if preset is None:
            return
        base = self.current.to_dict()
        base.update(preset)
        self.set_params(SamplingParams.from_dict(base))
        self.presets.setCurrentText(name)

    def save_preset(self, name: str) -> None:
        presets = self._user_presets()
        data = self.read().to_dict()
        data.pop("seed", None)
        presets[name] = data
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
