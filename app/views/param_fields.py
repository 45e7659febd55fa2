"""Numeric parameter widgets (a slider over a convenient range beside a spin box over
the whole valid range) and the table of every SamplingParams field by stage, made from
the stage specs (``engine/specs/<name>.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QBoxLayout,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QWidget,
)

from app.views.wheel_guard import wheel_only_when_focused
from engine.api.params import MAX_TOKENS_RANGE, TOP_LOGPROBS_RANGE
from engine.specs.registry import SPECS
from engine.specs.spec import Field

SLIDER_STEPS = 1000
SLIDER_MIN_LINES = 4
"""A slider's least width beside its box, in text lines: a box with a wide range (τ, max
tokens) took all but a square of it at 1000×700; narrower, the slider goes
above the box, the whole width its own."""


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


def _field_spec(field: Field) -> FieldSpec:
    decimals = None if field.kind is int else (field.decimals if field.decimals is not None else 2)
    return FieldSpec(field.name, field.label, field.slider, field.spin_range, decimals, field.help)


# Made from the stage specs. Spin boxes start just above an exclusive lower bound (top_p,
# typical_p, repetition penalty must be > 0: the spec's ``spin``): the smallest value a
# person can type is then a valid one. List fields (DRY's breakers) have their own editor.
STAGE_FIELDS: dict[str, tuple[FieldSpec, ...]] = {
    name: tuple(_field_spec(f) for f in spec.fields if f.kind is not tuple)
    for name, spec in SPECS.items()
    if spec.reorderable
}
LIST_FIELDS: dict[str, tuple[Field, ...]] = {
    name: tuple(f for f in spec.fields if f.kind is tuple and not f.custom)
    for name, spec in SPECS.items()
    if spec.reorderable
}
CUSTOM_FIELDS: dict[str, tuple[Field, ...]] = {
    name: tuple(f for f in spec.fields if f.custom) for name, spec in SPECS.items() if spec.reorderable
}
"""Fields edited in a section of their own (the grammar's: Structured output), by stage."""
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


# Spin boxes that take a typed number beyond their range while it is typed; when the edit
# ends (Enter, leaving the box) the parameters' boxes refuse it visibly: the box keeps its
# value and its ``refused`` says why, which the panel outlines as an error (-0.5
# was once clamped to 0 without a word); the compare count clamps it. Qt's own boxes drop the
# keystroke instead, so typing 5 into a box whose maximum is 2 did nothing. Qt calls
# ``validate`` and ``fixup`` as virtual methods, so each box overrides them.


def _typed_number(box: QAbstractSpinBox, text: str) -> float | None:
    core = text.removeprefix(box.prefix()).removesuffix(box.suffix()).strip()
    try:
        return float(core.replace(box.locale().decimalPoint(), "."))
    except ValueError:
        return None


def _relaxed(box: QAbstractSpinBox, state: object, text: str, pos: int) -> object:
    """Qt's verdict on ``text``, with a number out of range taken as still being typed."""
    if state[0] == QValidator.State.Invalid and _typed_number(box, text) is not None:  # type: ignore[index]
        return QValidator.State.Intermediate, text, pos
    return state


def _refusal(box: QSpinBox | QDoubleSpinBox, text: str) -> str:
    """Why ``text`` is not taken ("" when it holds no number out of the box's range)."""
    number = _typed_number(box, text)
    if number is None or box.minimum() <= number <= box.maximum():
        return ""
    lo, hi, kept = (box.textFromValue(v) for v in (box.minimum(), box.maximum(), box.value()))
    return f"{text.strip()} is outside {lo} – {hi}: not taken (still {kept})"


def _clamped(box: QSpinBox | QDoubleSpinBox, text: str) -> str | None:
    """``text``'s number clamped into the box's range, as the box writes it; None: no number."""
    number = _typed_number(box, text)
    if number is None:
        return None
    clamped = min(max(number, box.minimum()), box.maximum())
    return box.textFromValue(clamped if isinstance(box, QDoubleSpinBox) else round(clamped))


class ClampingSpinBox(QSpinBox):
    """Clamps a number typed beyond its range (the compare count: 9 settings gives 4)."""

    def validate(self, text: str, pos: int) -> object:
        return _relaxed(self, super().validate(text, pos), text, pos)

    def fixup(self, text: str) -> str:
        clamped = _clamped(self, text)
        return super().fixup(text) if clamped is None else clamped


def _refusing(base: type[QSpinBox] | type[QDoubleSpinBox]) -> type:
    """``base`` refusing a number typed beyond its range (kept, and said why), not clamping it:
    one definition for the integer and the decimal box."""

    class Refusing(base):  # type: ignore[misc, valid-type]
        fixed = False
        """Whether the edit under way needed a fixup (was not a number in range)."""
        refused = ""
        """Why the last number typed was not taken ("" once a value is taken)."""

        def validate(self, text: str, pos: int) -> object:
            return _relaxed(self, super().validate(text, pos), text, pos)

        def fixup(self, text: str) -> str:
            self.refused, self.fixed = _refusal(self, text), True
            return super().fixup(text)

    Refusing.__name__ = Refusing.__qualname__ = f"Refusing{base.__name__[1:]}"
    return Refusing


RefusingSpinBox = _refusing(QSpinBox)
RefusingDoubleSpinBox = _refusing(QDoubleSpinBox)


def mark_error(widget: QWidget, reason: str) -> None:
    """Outline ``widget`` in red with ``reason`` as its tooltip ("" clears both and gives the
    widget its own tooltip back): the reason shows where the outline is, at once."""
    plain = widget.property("plain_tip")  # the own tooltip, kept only while outlined
    widget.setStyleSheet(ERROR_STYLE if reason else "")
    if reason:
        if plain is None:
            widget.setProperty("plain_tip", widget.toolTip())
        widget.setToolTip(reason)
    elif plain is not None:  # not outlined: a tooltip set since (the Answer tab's) stays
        widget.setToolTip(plain)
        widget.setProperty("plain_tip", None)


class SliderField(QWidget):
    """A slider (over a convenient range) and a spin box (over the whole valid range)."""

    def __init__(self, spin: QAbstractSpinBox, slider_range: tuple[float, float], on_change: Callable[[], None]):
        super().__init__()
        self.lo, self.hi = slider_range
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, SLIDER_STEPS)
        self.spin = spin
        self.spin.setKeyboardTracking(False)
        wheel_only_when_focused(self.slider, self.spin)  # a wheel passing over scrolls the panel
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.box = layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.spin)
        self.slider.valueChanged.connect(self._from_slider)
        self.spin.valueChanged.connect(self._from_spin)
        self.spin.editingFinished.connect(self._edit_ended)
        self.spin.lineEdit().textEdited.connect(self._text_edited)
        self._edited = False
        """Whether the text was typed into since the last edit ended (leaving the box
        untouched keeps a refusal shown)."""
        self._on_change = on_change

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        room = event.size().width() - self.spin.sizeHint().width() - self.box.spacing()
        beside = room >= SLIDER_MIN_LINES * self.fontMetrics().height()
        direction = QBoxLayout.Direction.LeftToRight if beside else QBoxLayout.Direction.TopToBottom
        if self.box.direction() != direction:
            self.box.setDirection(direction)
            self.updateGeometry()  # its height is its hint's (the form gave the row a stale one)

    @property
    def refused(self) -> str:
        """Why the number last typed was not taken ("" when it was)."""
        return getattr(self.spin, "refused", "")

    def _edit_ended(self) -> None:
        # A refused number leaves the value as it was (no valueChanged), so the panel hears of
        # it here; an edit that needed no fixup was taken, which ends an earlier refusal.
        if self._edited and not getattr(self.spin, "fixed", False):
            self.spin.refused = ""
        self.spin.fixed = self._edited = False
        self._on_change()

    def _text_edited(self) -> None:
        self._edited = True

    def value(self) -> float:
        return self.spin.value()

    def set_value(self, value: float) -> None:
        self.spin.refused = ""
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
        self.spin.refused = ""
        self.spin.blockSignals(True)
        self.spin.setValue(self._slider_value(position))
        self.spin.blockSignals(False)
        self._on_change()

    def _from_spin(self, value: float) -> None:
        self.spin.refused = ""
        self._sync_slider(value)
        self._on_change()


class FloatField(SliderField):
    def __init__(self, slider_range, spin_range, decimals: int, on_change: Callable[[], None]):
        spin = RefusingDoubleSpinBox()
        spin.setRange(*spin_range)
        spin.setDecimals(decimals)
        spin.setSingleStep(10 ** -min(decimals, 2))
        super().__init__(spin, slider_range, on_change)


class IntField(SliderField):
    def __init__(self, slider_range, spin_range, on_change: Callable[[], None]):
        spin = RefusingSpinBox()
        spin.setRange(int(spin_range[0]), min(int(spin_range[1]), 2**31 - 1))  # QSpinBox holds int32
        super().__init__(spin, slider_range, on_change)

    def _slider_value(self, position: int) -> int:
        return round(super()._slider_value(position))


def narrow_form(form: QFormLayout) -> QFormLayout:
    """A form whose rows put the field under its label where the two do not fit side by
    side, so a narrow Sampling dock needs no horizontal scrolling."""
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    return form


def make_field(spec: FieldSpec, on_change: Callable[[], None]) -> SliderField:
    if spec.decimals is None:
        field = IntField(spec.slider, spec.spin, on_change)
    else:
        field = FloatField(spec.slider, spec.spin, spec.decimals, on_change)
    field.setToolTip(f"{spec.name}: {spec.tip}")
    return field
