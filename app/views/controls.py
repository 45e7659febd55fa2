"""Sampling controls: presets, the chain editor (every stage, its order, switch and
parameters), the structured output (``app/views/structured_output.py``), the reply's own
settings (length, candidates, seed, logit bias, stop).

Each change builds a new SamplingParams (which validates itself) and checks the
logit-bias ids against the loaded model's vocabulary (:meth:`SamplingControls.set_vocab_size`)
and, for a server, what its kind cannot apply (:meth:`SamplingControls.set_server`);
every value refused is outlined in red, found by its error's ``field``, and the message lists
each one. Invalid values are never sent: :meth:`SamplingControls.send_problem` says why Send
is refused. Errors the engine raises later come back through :meth:`SamplingControls.show_error`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
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

from app.model.param_check import check_values, error_message
from app.model.param_text import format_bias, parse_bias, parse_seed, parse_stop
from app.model.presets import BUILTIN_PRESETS, CUSTOM, apply_preset, is_reserved, preset_data, preset_matches
from app.views.chain_editor import ChainEditor
from app.views.file_dialogs import Folders
from app.views.fitting import WrapRow
from app.views.lines_edit import LinesEdit
from app.views.param_fields import ERROR_STYLE, REPLY_FIELDS, SliderField, make_field, mark_error, narrow_form
from app.views.structured_output import StructuredOutputBox
from app.views.wheel_guard import wheel_only_when_focused
from engine.api.params import SamplingParams, SamplingParamsError
from engine.remote.servers import KINDS
from engine.remote.structured import grammar_note

STOP_TIP = (
    "stop: strings that end the reply (not shown), one per line; a line is taken whole, "
    "so <|im_end|> is one stop string. Escapes: \\n newline, \\t tab, \\\\ backslash."
)


class SamplingControls(QWidget):
    params_changed = Signal(object)  # SamplingParams

    def __init__(self, settings: QSettings | None = None) -> None:
        super().__init__()
        self.settings = settings
        self._loading = False
        self.vocab_size = 0
        """The loaded model's vocabulary size, for logit-bias ids; 0 = not known."""
        self.server = ""
        """The kind of the server in use (``ModelInfo.server``), whose refusals are errors here; "" = local."""
        self.errors: list[SamplingParamsError] = []
        """Every value the panel refuses now (empty when it can be sent)."""
        self.reasoning: dict[str, Any] = {}
        """``thinking_budget`` and ``think_variant``, set by the dock's reasoning row
        (``app.views.reasoning_controls``) and sent with these settings."""
        self.chain = ChainEditor()
        self.chain.changed.connect(self._changed)
        # The grammar: a field of the chain's grammar stage, edited in a section of its own.
        self.structured = StructuredOutputBox(Folders(settings))
        self.structured.changed.connect(lambda: self.chain.set_custom("grammar", self.structured.value()))
        # Every numeric field by name, the chain's and the reply's, for presets and errors.
        self.fields: dict[str, SliderField] = dict(self.chain.fields)
        reply_form = narrow_form(QFormLayout())
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
        self.stop = LinesEdit(STOP_TIP, rows=3, placeholder="one stop string per line  (\\n = newline)")
        self.stop.edited.connect(self._changed)
        reply_form.addRow("Stop", self.stop)
        self._text_fields: dict[str, QWidget] = {"seed": self.seed, "logit_bias": self.bias, "stop": self.stop}

        self.presets = QComboBox()
        self.presets.activated.connect(lambda _: self.apply_preset(self.presets.currentText()))
        self.presets.setMinimumContentsLength(10)
        wheel_only_when_focused(self.presets)
        self.presets.currentTextChanged.connect(self._update_delete)
        self.save_button = QPushButton("Save…")
        self.save_button.setToolTip("Save these settings as a preset of your own")
        self.save_button.clicked.connect(self._save_preset)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(lambda: self.delete_preset(self.presets.currentText()))
        # Label and combo side by side where they fit, else one under the other; the buttons
        # on a row of their own, no wider than their words: a narrow dock cut them off.
        preset_row = WrapRow([(QLabel("Preset"), 0), (self.presets, 1)])
        preset_buttons = QHBoxLayout()
        preset_buttons.addStretch(1)
        for button in (self.save_button, self.delete_button):
            button.setMinimumWidth(button.fontMetrics().horizontalAdvance(button.text()) + 16)
            preset_buttons.addWidget(button)
        self.preset_note = QLabel()
        self.preset_note.setWordWrap(True)
        self.preset_note.hide()
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d93025")
        self.live_note = QLabel("Changes (values and order) apply from the next token, also during a reply.")
        self.live_note.setWordWrap(True)
        self.live_note.setEnabled(False)

        chain_box = QGroupBox("Chain")
        chain_layout = QVBoxLayout(chain_box)
        chain_layout.setContentsMargins(4, 4, 4, 4)  # the panel's width goes to the fields
        chain_layout.addWidget(self.chain)
        reply_box = QGroupBox("Reply")
        reply_box.setLayout(reply_form)
        reply_form.setContentsMargins(4, 4, 4, 4)
        inner = QWidget()
        layout = QVBoxLayout(inner)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(preset_row)
        layout.addLayout(preset_buttons)
        layout.addWidget(self.preset_note)
        layout.addWidget(self.error)
        layout.addWidget(chain_box)
        layout.addWidget(self.structured)
        layout.addWidget(reply_box)
        layout.addWidget(self.live_note)
        layout.addStretch(1)
        # The panel is taller than a small screen: it scrolls rather than squeezing the fields.
        self.scroll = scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # not a Tab stop: its fields are (and scroll into view)
        scroll.setWidget(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        self.current = SamplingParams()
        self._refresh_presets()
        self.set_params(self.current)

    # Values --------------------------------------------------------------------------

    def read_all(self) -> tuple[SamplingParams | None, list[SamplingParamsError]]:
        """The parameters shown, or None and every error, in the panel's order."""
        values: dict[str, Any] = self.chain.values()
        values.update({spec.name: self.fields[spec.name].value() for spec in REPLY_FIELDS})
        values.update(self.reasoning)
        errors: list[SamplingParamsError] = []
        texts = (
            ("seed", parse_seed, self.seed.text()),
            ("logit_bias", parse_bias, self.bias.text()),
            ("stop", parse_stop, self.stop.toPlainText()),
        )
        for name, parse, text in texts:
            try:
                values[name] = parse(text)
            except SamplingParamsError as exc:
                errors.append(exc)
        errors += [SamplingParamsError(n, None, f"{n}: {f.refused}") for n, f in self.fields.items() if f.refused]
        params, more = check_values(values, self.vocab_size, self.server)
        order = [*self.chain.fields, *self.chain.lists, "samplers", "grammar", *self._reply_names(), *self._text_fields]
        errors += more
        errors.sort(key=lambda e: order.index(e.field) if e.field in order else len(order))
        return (None if errors else params), errors

    def read(self) -> SamplingParams:
        """The parameters shown; raises the first error."""
        params, errors = self.read_all()
        if params is None:
            raise errors[0]
        return params

    def set_params(self, params: SamplingParams) -> None:
        self._loading = True
        self.reasoning = {"thinking_budget": params.thinking_budget, "think_variant": params.think_variant}
        try:
            self.chain.set_params(params)
            self.structured.set_value(params.grammar)
            for spec in REPLY_FIELDS:
                self.fields[spec.name].set_value(getattr(params, spec.name))
            self.seed.setText("" if params.seed is None else str(params.seed))
            self.bias.setText(format_bias(dict(params.logit_bias)))
            self.stop.set_lines(params.stop)
        finally:
            self._loading = False
        self._changed()

    def _changed(self) -> None:
        if self._loading:
            return
        params, errors = self.read_all()
        self.show_errors(errors)
        if params is None:
            return
        self._show_matching_preset(params)
        if params != self.current:
            self.current = params
            self.params_changed.emit(params)

    def set_reasoning(self, values: dict[str, Any]) -> None:
        """The reasoning row's fields (budget, the answer's settings), sent from now on."""
        if values != self.reasoning:
            self.reasoning = dict(values)
            self._changed()

    def set_vocab_size(self, vocab_size: int) -> None:
        """The loaded model's vocabulary size (0 = not known): logit-bias ids must be below it."""
        self.vocab_size = self.chain.vocab_size = max(0, int(vocab_size))
        self.chain.update_summaries()
        self._changed()

    def set_server(self, server: str) -> None:
        """The kind of the server in use ("" = the local engine): the fields it cannot apply
        are outlined at once, as any invalid value, and never sent."""
        self.server = server
        kind = KINDS.get(server)
        self.structured.set_server_note(grammar_note(kind) if kind is not None else "")
        self._changed()

    def send_problem(self) -> str:
        """Why the values shown cannot be sent, or "" when they can. Every bad value is
        outlined and the first one scrolled into view and focused, ready to be fixed."""
        self._changed()  # the fields as they read now, even mid-edit
        widgets = [w for w in map(self._widget_for, (e.field for e in self.errors)) if w is not None]
        if widgets:
            self.scroll.ensureWidgetVisible(widgets[0])
            widgets[0].setFocus()
        return error_message(self.errors)

    def _widget_for(self, field: str | None) -> QWidget | None:
        if field in self._text_fields:
            return self._text_fields[field]
        if field == "grammar":
            return self.structured.widget_for_error()
        if field in self._reply_names():
            return self.fields[field]
        return self.chain.widget_for(field) if field is not None else None

    def show_error(self, exc: SamplingParamsError | None) -> None:
        """Outline the widget of ``exc.field`` and show the message; None clears both."""
        self.show_errors([] if exc is None else [exc])

    def show_errors(self, errors: Sequence[SamplingParamsError]) -> None:
        """Outline the widget of every error's ``field`` and list the messages; [] clears."""
        self.errors = list(errors)
        reasons: dict[str, str] = {}
        for exc in errors:  # a field's reasons, each on a line of its tooltip
            field = getattr(exc, "field", None)
            if field is not None:
                reasons[field] = "\n".join(filter(None, (reasons.get(field), str(exc))))
        for field in [*self._text_fields, *self._reply_names()]:
            mark_error(self._widget_for(field), reasons.get(field, ""))
        self.structured.set_error(reasons.get("grammar", ""))
        self.chain.show_errors(reasons)
        self.error.setText(error_message(errors))

    def error_widget(self) -> QWidget | None:
        """The widget outlined as being at fault, if any (for tests and accessibility)."""
        lists = [*self.chain.lists.values(), self.chain.list, self.structured.text, self.structured.kind]
        candidates = [*self._text_fields.values(), *self.fields.values(), *lists]
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
        try:
            bias = parse_bias(self.bias.text())
        except SamplingParamsError:  # keep what was typed (it stays outlined): add the ban to it
            typed = self.bias.text().strip().rstrip(",")
            self.bias.setText(f"{typed}, {token_id}:-100" if typed else f"{token_id}:-100")
        else:
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
        # A built-in name always means the built-in preset (a saved one cannot shadow it).
        user = {name: data for name, data in self._user_presets().items() if not is_reserved(name)}
        return {**BUILTIN_PRESETS, **user}

    def _refresh_presets(self) -> None:
        self.presets.clear()
        self.presets.addItems(list(self._all_presets()))

    def _write_presets(self, presets: dict[str, dict]) -> None:
        if self.settings is not None:
            self.settings.setValue("presets", json.dumps(presets))
        self._refresh_presets()

    def _note(self, text: str) -> None:
        """A word about the last preset command (why it did nothing, or what it did)."""
        self.preset_note.setText(text)
        self.preset_note.setVisible(bool(text))

    def _update_delete(self, name: str) -> None:
        built_in = is_reserved(name)
        self.delete_button.setEnabled(not built_in and name in self._user_presets())
        self.delete_button.setToolTip(
            "Built-in presets cannot be deleted" if built_in else f"Delete the saved preset “{name}”"
        )

    def apply_preset(self, name: str) -> None:
        preset = self._all_presets().get(name)
        if preset is None:
            return
        try:
            params = apply_preset(self.current, preset)
        except (TypeError, ValueError) as exc:  # a saved preset this version cannot read
            self._note(f"Preset “{name}” cannot be applied: {exc}")
            return
        self._note("")
        self.set_params(params)
        self.presets.setCurrentText(name)

    def save_preset(self, name: str) -> bool:
        """Save the values shown as preset ``name``; False (and a note saying why) when the
        name is a built-in preset's or a value is invalid."""
        name = name.strip()
        if is_reserved(name):
            self._note(f"“{name}” is a built-in preset and cannot be replaced: choose another name.")
            return False
        params, errors = self.read_all()
        if params is None:
            self.show_errors(errors)
            self._note("Not saved: first fix the settings outlined in red.")
            return False
        self._write_presets({**self._user_presets(), name: preset_data(params)})
        self.presets.setCurrentText(name)
        self._note(f"Saved preset “{name}”.")
        return True

    def _save_preset(self) -> None:
        name, ok = QInputDialog.getText(self, "Save preset", "Preset name:")
        if ok and name.strip():
            self.save_preset(name)

    def delete_preset(self, name: str) -> bool:
        """Delete the saved preset ``name``; built-in presets cannot be (a note says so)."""
        if is_reserved(name):
            self._note(f"“{name}” is a built-in preset: only presets you saved can be deleted.")
            return False
        presets = self._user_presets()
        if presets.pop(name, None) is None:
            return False
        self._write_presets(presets)
        self._show_matching_preset(self.current)
        self._note(f"Preset “{name}” deleted.")
        return True
