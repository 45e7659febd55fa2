"""What the Sampling panel accepts and refuses (issue 11, points 4, 11 and 12): settings a
model would refuse are never sent, text fields parse as people expect, spin boxes refuse a number out of range visibly,
every invalid field is shown, and presets say why they cannot do what was asked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QInputDialog  # noqa: E402

from app.model.chat import ChatModel  # noqa: E402
from app.store.store import Store  # noqa: E402
from app.views.param_fields import ERROR_STYLE  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import TIMEOUT, close_window, open_window, settle  # noqa: E402

VOCAB = 300


@pytest.fixture
def controls(qtbot, tmp_path):
    from app.views.controls import SamplingControls

    widget = SamplingControls(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(widget)
    return widget


def enter_text(line_edit, text: str) -> None:
    """Type into a one-line field and leave it, as a person would."""
    line_edit.setText(text)
    line_edit.editingFinished.emit()


def outlined(controls) -> set[str]:
    """The names of the panel's widgets outlined as being at fault."""
    widgets = {"seed": controls.seed, "logit_bias": controls.bias, "stop": controls.stop}
    widgets["dry_sequence_breakers"] = controls.chain.lists["dry_sequence_breakers"]
    widgets.update(controls.fields)
    return {name for name, widget in widgets.items() if widget.styleSheet() == ERROR_STYLE}


# 4. Invalid settings are never sent --------------------------------------------------------------


def test_a_bias_id_outside_the_vocabulary_is_flagged_in_the_field(controls):
    # An id typed before the model is known is checked when it loads.
    enter_text(controls.bias, "400:1")
    assert controls.current.logit_bias == {400: 1.0}
    controls.set_vocab_size(VOCAB)
    assert controls.error_widget() is controls.bias
    before = controls.current
    enter_text(controls.bias, "99999999:5")
    assert controls.error_widget() is controls.bias
    assert "99999999" in controls.error.text() and str(VOCAB - 1) in controls.error.text()
    assert controls.current == before
    enter_text(controls.bias, "12:5")
    assert controls.error_widget() is None and controls.current.logit_bias == {12: 5.0}


def test_the_chat_model_refuses_settings_the_model_cannot_take_before_adding_the_turn(tmp_path):
    model = ChatModel(Store(tmp_path / "db.sqlite3"))
    model.in_use.info = SimpleNamespace(name="tiny", vocab_size=VOCAB, server="")  # as the loader sets it
    seen: dict[str, list] = {"job_submitted": [], "errored": []}
    for name, calls in seen.items():
        getattr(model.events, name).connect(lambda *args, calls=calls: calls.append(args))
    bad = SamplingParams(logit_bias={99999999: 5.0})
    assert not model.generation.send("hi", bad)
    assert not model.generation.send_compare("hi", [("A", SamplingParams()), ("B", bad)])
    assert model.conversation is None and model.thread == []
    assert seen["job_submitted"] == []
    assert [exc.field for (exc,) in seen["errored"]] == ["logit_bias", "logit_bias"]
    assert "B" in str(seen["errored"][1][0])  # which compare setting is at fault
    assert model.generation.send("hi", SamplingParams(logit_bias={5: 1.0}))
    assert len(model.thread) == 2 and len(seen["job_submitted"]) == 1


def test_send_with_invalid_settings_adds_nothing_and_says_why(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    controls = window.controls
    assert controls.vocab_size == window.model_info.vocab_size
    for text, expected in (("abc", "token_id:bias"), ("99999999:5", "99999999")):
        enter_text(controls.bias, text)
        window.composer.setPlainText("hi")
        qtbot.keyClick(window.composer, Qt.Key.Key_Return)
        assert window.model.thread == [] and not window.busy()
        assert window.composer.toPlainText() == "hi"  # the message is kept to send again
        assert controls.error_widget() is controls.bias
        assert expected in controls.error.text()
        assert expected in window.statusBar().currentMessage()
        assert window.focusWidget() is controls.bias  # ready to be fixed (scrolled into view)
    enter_text(controls.bias, "")
    # Compare mode: a bad value on tab B refuses the send and brings tab B forward.
    window.panel.set_compare(True, 2)
    tab_b = window.panel.variant_controls[1]
    enter_text(tab_b.seed, "twelve")
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    assert window.model.thread == [] and not window.busy()
    assert window.panel.tabs.currentIndex() == 1
    assert tab_b.error_widget() is tab_b.seed
    assert "B" in window.statusBar().currentMessage() and "seed" in window.statusBar().currentMessage()
    # Valid settings go through.
    window.panel.set_compare(False)
    controls.set_params(SamplingParams(max_tokens=2))
    qtbot.keyClick(window.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.busy(), timeout=TIMEOUT)
    assert len(window.model.thread) == 2
    close_window(window)


# 11. Input parsing -----------------------------------------------------------------------------


def test_stop_strings_are_one_per_line_and_may_hold_a_pipe(controls):
    params = SamplingParams(stop=("<|im_end|>", "\n\n", "a\\b"))
    controls.set_params(params)
    assert controls.current.stop == params.stop
    controls.stop.setPlainText("<|im_end|>\n\\n\\n\n\nEND")
    controls.stop.edited.emit()
    assert controls.current.stop == ("<|im_end|>", "\n\n", "END")
    assert controls.error_widget() is None


def test_a_bias_id_given_twice_is_an_error_that_names_it(controls):
    before = controls.current
    enter_text(controls.bias, "1:5, 7:1, 1:-6")
    assert controls.error_widget() is controls.bias
    assert "1" in controls.error.text() and "twice" in controls.error.text()
    assert controls.current == before
    controls.ban_token(3)  # the inspector's "ban" keeps what was typed
    assert controls.bias.text().startswith("1:5, 7:1, 1:-6")


def type_into(qtbot, spin, typed: str) -> None:
    """Select the box's text, type over it key by key and press Enter, as a person would."""
    spin.setFocus()
    spin.selectAll()
    qtbot.keyClicks(spin, typed)
    qtbot.keyClick(spin, Qt.Key.Key_Return)


def test_a_typed_value_beyond_the_range_is_refused_visibly(controls, qtbot):
    # Issue 35: XTC probability took "-0.5" and clamped it to 0 without a word. Now the value
    # kept is the one before, the field is outlined with the reason as tooltip, Send is refused.
    controls.set_params(SamplingParams(top_p=0.5, top_logprobs=5, max_tokens=20, xtc_probability=0.3))
    for name, typed, kept in (
        ("xtc_probability", "-0.5", 0.3),
        ("top_p", "5", 0.5),
        ("top_logprobs", "500", 5),
        ("max_tokens", "0", 20),
    ):
        field = controls.fields[name]
        slider_before = field.slider.value()
        type_into(qtbot, field.spin, typed)
        assert field.spin.value() == kept, name
        assert field.slider.value() == slider_before, name  # the slider did not jump
        assert getattr(controls.current, name) == kept
        assert name in outlined(controls)
        assert typed in field.toolTip() and "not taken" in field.toolTip(), field.toolTip()
        assert controls.send_problem(), name
        type_into(qtbot, field.spin, str(kept))  # a value in range ends the refusal
        assert name not in outlined(controls) and not controls.send_problem()
        assert typed not in field.toolTip()


def test_an_outlined_field_has_its_reason_as_tooltip_at_once(controls, qtbot):
    # Issue 35: the reason showed only in the status bar after Send; the README says the field
    # is outlined "with the reason". Typed with real keys, no Send.
    controls.set_vocab_size(VOCAB)
    plain = controls.bias.toolTip()
    controls.bias.setFocus()
    qtbot.keyClicks(controls.bias, "400:1")
    qtbot.keyClick(controls.bias, Qt.Key.Key_Return)
    assert controls.error_widget() is controls.bias
    assert "400" in controls.bias.toolTip() and str(VOCAB - 1) in controls.bias.toolTip()
    controls.bias.selectAll()
    qtbot.keyClicks(controls.bias, "4:1")
    qtbot.keyClick(controls.bias, Qt.Key.Key_Return)
    assert controls.error_widget() is None and controls.bias.toolTip() == plain
    # A chain field: the reason is on the field itself.
    field = controls.fields["xtc_threshold"]
    type_into(qtbot, field.spin, "7")
    assert "xtc_threshold" in outlined(controls) and "7" in field.toolTip()


def test_a_top_k_at_least_the_vocabulary_shows_no_effect(controls, qtbot):
    from app.views.chain_editor import NEUTRAL_ROLE, STAGE_ROLE

    controls.set_vocab_size(VOCAB)
    rows = [controls.chain.list.item(i) for i in range(controls.chain.list.count())]
    item = next(row for row in rows if row.data(STAGE_ROLE) == "top_k")
    controls.chain.select_stage("top_k")
    type_into(qtbot, controls.fields["top_k"].spin, "40")
    assert controls.current.top_k == 40 and not item.data(NEUTRAL_ROLE)
    type_into(qtbot, controls.fields["top_k"].spin, "999999")
    assert controls.current.top_k == 999999 and item.data(NEUTRAL_ROLE)
    type_into(qtbot, controls.fields["top_k"].spin, str(VOCAB))
    assert item.data(NEUTRAL_ROLE)
    type_into(qtbot, controls.fields["top_k"].spin, str(VOCAB - 1))
    assert not item.data(NEUTRAL_ROLE)


def test_the_compare_count_clamps_too(qtbot, tmp_path):
    from app.views.sampling_panel import SamplingPanel

    panel = SamplingPanel(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(panel)
    panel.set_compare(True, 2)
    panel.count.setFocus()
    panel.count.selectAll()
    qtbot.keyClicks(panel.count, "9")
    qtbot.keyClick(panel.count, Qt.Key.Key_Return)
    assert panel.count.value() == 4


def test_every_invalid_field_is_outlined_and_named(controls):
    controls.set_vocab_size(VOCAB)
    enter_text(controls.seed, "abc")
    enter_text(controls.bias, "5:x")
    assert outlined(controls) == {"seed", "logit_bias"}
    lines = controls.error.text().splitlines()
    assert len(lines) == 2 and "seed" in lines[0] and "logit_bias" in lines[1]
    controls.chain.lists["dry_sequence_breakers"].setPlainText("x" * 41)  # a third, checked by SamplingParams itself
    controls.chain.lists["dry_sequence_breakers"].edited.emit()
    assert outlined(controls) == {"seed", "logit_bias", "dry_sequence_breakers"}
    assert len(controls.error.text().splitlines()) == 3
    enter_text(controls.seed, "")
    assert outlined(controls) == {"logit_bias", "dry_sequence_breakers"}


# 12. Presets ----------------------------------------------------------------------------------


def test_built_in_presets_are_neither_overwritten_nor_deleted_and_say_so(controls, qtbot):
    controls.set_params(SamplingParams(temperature=0.9))
    assert not controls.save_preset("Greedy")
    assert "built-in" in controls.preset_note.text()
    controls.apply_preset("Greedy")
    assert controls.current.temperature == 0.0
    assert not controls.delete_button.isEnabled()
    assert "built-in" in controls.delete_button.toolTip().lower()
    controls.delete_preset("Greedy")
    assert "built-in" in controls.preset_note.text()
    assert "Greedy" in [controls.presets.itemText(i) for i in range(controls.presets.count())]
    # The dialog: a built-in name is refused with a message, not silently dropped.
    controls.set_params(SamplingParams(temperature=0.9))

    def answer(name: str) -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, QInputDialog)
        dialog.setTextValue(name)
        dialog.accept()

    QTimer.singleShot(0, lambda: answer("Balanced"))
    controls.save_button.click()
    assert "built-in" in controls.preset_note.text() and "Balanced" in controls.preset_note.text()
    QTimer.singleShot(0, lambda: answer("Mine"))
    controls.save_button.click()
    assert controls.presets.currentText() == "Mine" and controls.delete_button.isEnabled()
    controls.delete_button.click()
    names = [controls.presets.itemText(i) for i in range(controls.presets.count())]
    assert "Mine" not in names and "deleted" in controls.preset_note.text()


def test_compare_tabs_are_short_and_all_fit(qtbot, tmp_path):
    # Issue 35: a tab's label was its whole settings string, so the bar showed one tab.
    from app.views.sampling_panel import SamplingPanel

    panel = SamplingPanel(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(panel)
    panel.resize(360, 700)
    panel.show()
    panel.set_compare(True, 3)
    base = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1, seed=7)
    for i, temperature in enumerate((0.7, 0.9, 1.3)):
        panel.variant_controls[i].set_params(SamplingParams(**{**base, "temperature": temperature}))
    settle(panel)
    bar = panel.tabs
    texts = [bar.tabText(i) for i in range(3)]
    for i, temperature in enumerate(("0.7", "0.9", "1.3")):
        assert temperature in texts[i], texts  # what differs is named
        assert "top-k" not in texts[i], texts  # what all share is not
        assert "top-k" in bar.tabToolTip(i) and "seed 7" in bar.tabToolTip(i)  # the whole, in its tooltip
    width = sum(bar.tabRect(i).width() for i in range(3))
    assert width <= panel.width(), (width, panel.width(), texts)
