"""Numeric parameter widgets (a slider over a convenient range beside a spin box over
the whole valid range) and the table of every numeric SamplingParams field by stage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QHBoxLayout, QSlider, QSpinBox, QWidget

from engine.params import (
    DRY_ALLOWED_LENGTH_RANGE,
    DRY_BASE_RANGE,
    DRY_MULTIPLIER_RANGE,
    DRY_PENALTY_LAST_N_RANGE,
    DYNATEMP_EXPONENT_RANGE,
    DYNATEMP_RANGE_RANGE,
    FREQUENCY_PENALTY_RANGE,
    MAX_TOKENS_RANGE,
    MIN_P_RANGE,
    PENALTY_WINDOW_RANGE,
    PRESENCE_PENALTY_RANGE,
    REPETITION_PENALTY_RANGE,
    TEMPERATURE_RANGE,
    TOP_K_RANGE,
    TOP_LOGPROBS_RANGE,
    TOP_N_SIGMA_RANGE,
    TOP_P_RANGE,
    TYPICAL_P_RANGE,
    XTC_PROBABILITY_RANGE,
    XTC_THRESHOLD_RANGE,
)

SLIDER_STEPS = 1000


@dataclass(frozen=True)
class FieldSpec:
    """One numeric SamplingParams field as the panel shows it."""

    name: str
    label: str
    slider: tuple[float, float]
    """The slider's span: the values people try; the spin box takes the whole range."""
    spin: tuple[float, float]
    decimals: int | None
    """None for an integer field."""
    tip: str
    """What the field does and its off value."""


# Spin boxes start just above an exclusive lower bound (top_p, typical_p, repetition
# penalty must be > 0): the smallest value a person can type is then a valid one.
STAGE_FIELDS: dict[str, tuple[FieldSpec, ...]] = {
    "penalties": (
        FieldSpec(
            "repetition_penalty",
            "Repetition",
            (0.5, 2.0),
            (0.01, REPETITION_PENALTY_RANGE[1]),
            3,
            "Divide positive / multiply negative logits of tokens seen in the window. 1 = off.",
        ),
        FieldSpec(
            "presence_penalty",
            "Presence",
            (-2.0, 2.0),
            PRESENCE_PENALTY_RANGE,
            2,
            "Subtract from the logit of every token seen in the window. 0 = off.",
        ),
        FieldSpec(
            "frequency_penalty",
            "Frequency",
            (-2.0, 2.0),
            FREQUENCY_PENALTY_RANGE,
            2,
            "Subtract frequency × count from the logit of tokens seen in the window. 0 = off.",
        ),
        FieldSpec(
            "penalty_window",
            "Window",
            (0, 1024),
            PENALTY_WINDOW_RANGE,
            None,
            "Tokens of prompt + output the penalties count. 0 = all of them.",
        ),
    ),
    "dry": (
        FieldSpec(
            "dry_multiplier",
            "Multiplier",
            (0.0, 3.0),
            DRY_MULTIPLIER_RANGE,
            2,
            "DRY strength: a token that would extend a repeat loses multiplier · base^(length − allowed). 0 = off.",
        ),
        FieldSpec(
            "dry_base",
            "Base",
            (1.0, 4.0),
            DRY_BASE_RANGE,
            2,
            "How fast the DRY penalty grows with the repeat's length (default 1.75).",
        ),
        FieldSpec(
            "dry_allowed_length",
            "Allowed length",
            (1, 10),
            DRY_ALLOWED_LENGTH_RANGE,
            None,
            "Repeats up to this many tokens are not penalized (default 2).",
        ),
        FieldSpec(
            "dry_penalty_last_n",
            "Last n tokens",
            (-1, 4096),
            DRY_PENALTY_LAST_N_RANGE,
            None,
            "Tokens of prompt + output searched for repeats. −1 = the whole context, 0 = off.",
        ),
    ),
    "temperature": (
        FieldSpec(
            "temperature",
            "Temperature",
            (0.0, 2.0),
            TEMPERATURE_RANGE,
            2,
            "Divides the logits. 1 = off; 0 = greedy (the most likely token entering this stage).",
        ),
        FieldSpec(
            "dynatemp_range",
            "Dynamic range",
            (0.0, 2.0),
            DYNATEMP_RANGE_RANGE,
            2,
            "Dynamic temperature: T moves within T ± range with the entropy (llama.cpp temp_ext). 0 = off.",
        ),
        FieldSpec(
            "dynatemp_exponent",
            "Dynamic exponent",
            (0.0, 4.0),
            DYNATEMP_EXPONENT_RANGE,
            2,
            "Dynamic temperature: exponent on the normalized entropy (default 1; no effect when the range is 0).",
        ),
    ),
    "top_k": (FieldSpec("top_k", "k", (0, 200), TOP_K_RANGE, None, "Keep the k most likely tokens. 0 = off."),),
    "top_p": (
        FieldSpec(
            "top_p",
            "p",
            (0.01, 1.0),
            (0.01, TOP_P_RANGE[1]),
            3,
            "Keep the smallest set of most likely tokens whose probability reaches p. 1 = off.",
        ),
    ),
    "min_p": (
        FieldSpec(
            "min_p",
            "min p",
            (0.0, 0.5),
            MIN_P_RANGE,
            3,
            "Drop tokens below min_p × the top probability. 0 = off.",
        ),
    ),
    "typical_p": (
        FieldSpec(
            "typical_p",
            "p",
            (0.01, 1.0),
            (0.001, TYPICAL_P_RANGE[1]),
            3,
            "Locally typical sampling: keep the tokens closest to the expected surprisal until their mass "
            "reaches p. 1 = off.",
        ),
    ),
    "top_n_sigma": (
        FieldSpec(
            "top_n_sigma",
            "n",
            (0.0, 5.0),
            TOP_N_SIGMA_RANGE,
            2,
            "Keep logits ≥ max − n·σ over the tokens still in the distribution. 0 = off.",
        ),
    ),
    "xtc": (
        FieldSpec(
            "xtc_probability",
            "Probability",
            (0.0, 1.0),
            XTC_PROBABILITY_RANGE,
            2,
            "Exclude top choices: the chance per token that XTC acts (its own seeded coin). 0 = off.",
        ),
        FieldSpec(
            "xtc_threshold",
            "Threshold",
            (0.0, 0.5),
            XTC_THRESHOLD_RANGE,
            3,
            "When two or more tokens reach this probability, all but the least likely of them are removed "
            "(default 0.1). Above 0.5 XTC never acts.",
        ),
    ),
}
REPLY_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("max_tokens", "Max tokens", (1, 2048), MAX_TOKENS_RANGE, None, "Most tokens to generate."),
    FieldSpec(
        "top_logprobs",
        "Candidates shown",
        (0, 100),
        TOP_LOGPROBS_RANGE,
        None,
        "Candidates kept per token: the top N of raw and of the last stage, and the chosen one.",
    ),
)
ERROR_STYLE = "border: 2px solid #d93025;"


class _Clamping:
    """A spin box that takes a typed number beyond its range and clamps it when the edit
    ends (Enter, leaving the box). Qt's own boxes refuse the keystroke instead, so typing 5
    into a box whose maximum is 2 did nothing."""

    def _typed_number(self: QAbstractSpinBox, text: str) -> float | None:
        core = text.removeprefix(self.prefix()).removesuffix(self.suffix()).strip()
        try:
            return float(core.replace(self.locale().decimalPoint(), "."))
        except ValueError:
            return None

    def validate(self, text: str, pos: int) -> object:
        state = super().validate(text, pos)  # type: ignore[misc]
        if state[0] == QValidator.State.Invalid and self._typed_number(text) is not None:
            return QValidator.State.Intermediate, text, pos
        return state

    def fixup(self, text: str) -> str:
        number = self._typed_number(text)
        if number is None:
            return super().fixup(text)  # type: ignore[misc]
        clamped = min(max(number, self.minimum()), self.maximum())
        return self.textFromValue(clamped if isinstance(self, QDoubleSpinBox) else round(clamped))


class ClampingSpinBox(_Clamping, QSpinBox):
    pass


class ClampingDoubleSpinBox(_Clamping, QDoubleSpinBox):
    pass


class SliderField(QWidget):
    """A slider (over a convenient range) and a spin box (over the whole valid range)."""

    def __init__(self, spin: QAbstractSpinBox, slider_range: tuple[float, float], on_change: Callable[[], None]):
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

    def value(self) -> float:
        return self.spin.value()

    def set_value(self, value: float) -> None:
        self.spin.blockSignals(True)
        self.spin.setValue(value)
        self.spin.blockSignals(False)
        self._sync_slider(value)

    def _sync_slider(self, value: float) -> None:
        self.slider.blockSignals(True)
        fraction = (min(max(value, self.lo), self.hi) - self.lo) / (self.hi - self.lo)
        self.slider.setValue(round(fraction * SLIDER_STEPS))
        self.slider.blockSignals(False)

    def _slider_value(self, position: int) -> float:
        return self.lo + (self.hi - self.lo) * position / SLIDER_STEPS

    def _from_slider(self, position: int) -> None:
        self.spin.blockSignals(True)
        self.spin.setValue(self._slider_value(position))
        self.spin.blockSignals(False)
        self._on_change()

    def _from_spin(self, value: float) -> None:
        self._sync_slider(value)
        self._on_change()


class FloatField(SliderField):
    def __init__(self, slider_range, spin_range, decimals: int, on_change: Callable[[], None]):
        spin = ClampingDoubleSpinBox()
        spin.setRange(*spin_range)
        spin.setDecimals(decimals)
        spin.setSingleStep(10 ** -min(decimals, 2))
        super().__init__(spin, slider_range, on_change)


class IntField(SliderField):
    def __init__(self, slider_range, spin_range, on_change: Callable[[], None]):
        spin = ClampingSpinBox()
        spin.setRange(int(spin_range[0]), min(int(spin_range[1]), 2**31 - 1))  # QSpinBox holds int32
        super().__init__(spin, slider_range, on_change)

    def _slider_value(self, position: int) -> int:
        return round(super()._slider_value(position))


def make_field(spec: FieldSpec, on_change: Callable[[], None]) -> SliderField:
    if spec.decimals is None:
        field = IntField(spec.slider, spec.spin, on_change)
    else:
        field = FloatField(spec.slider, spec.spin, spec.decimals, on_change)
    field.setToolTip(f"{spec.name}: {spec.tip}")
    return field
