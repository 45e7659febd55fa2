"""The app's views of the stage chain, on hand-built TokenSteps (no model): the inspector's
chain view, the chain editor and presets, field errors, and the timeline's stage selector."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QModelIndex, Qt  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402

from app.model.param_text import format_breakers, parse_breakers  # noqa: E402
from app.views.chain_view import REMOVED_ROLE, VALUE_ROLE, format_p  # noqa: E402
from app.views.theme import LIGHT  # noqa: E402
from engine.api.events import Candidate, TokenStep  # noqa: E402
from engine.api.params import (  # noqa: E402
    DEFAULT_SAMPLERS,
    LLAMA_CPP_SAMPLERS,
    SamplingParams,
    SamplingParamsError,
)
from tests.support.chain_steps import chain_step, simple_step  # noqa: E402


@pytest.fixture
def inspector(qtbot):
    from app.views.inspector import InspectorWidget

    widget = InspectorWidget()
    qtbot.addWidget(widget)
    widget.set_colors(LIGHT)
    return widget


@pytest.fixture
def controls(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.views.controls import SamplingControls

    widget = SamplingControls(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(widget)
    return widget


# The inspector's chain view -----------------------------------------------------------------


def test_chain_view_shows_every_candidate_through_every_stage(inspector):
    step = chain_step()
    inspector.show_step(step)
    model = inspector.chain_view.model()
    assert inspector.tabs.currentWidget() is inspector.chain_view
    # Columns: the step's chain under its exact stage names, with entropy and survivors.
    assert model.columnCount() == len(step.chain) == 7
    for col, stage in enumerate(step.chain):
        assert model.headerData(col, Qt.Orientation.Horizontal, VALUE_ROLE) == stage
        head = model.headerData(col, Qt.Orientation.Horizontal).split("\n")
        assert head == [stage, f"H {step.entropies[col]:.2f}", f"n {step.survivors[col]:,}"]
    # Rows: the candidates in raw rank, whatever order they came in.
    raw_order = sorted(step.top, key=lambda c: -c.raw_logit)
    assert [c.token_id for c in inspector.candidates] == [c.token_id for c in raw_order]
    assert model.rowCount() == 12
    for row, cand in enumerate(raw_order):
        for col, stage in enumerate(step.chain):
            index = model.index(row, col)
            lp = cand.logprobs[col]
            if cand.removed_by is None or col < step.chain.index(cand.removed_by):
                assert model.data(index, VALUE_ROLE) == pytest.approx(math.exp(lp), rel=1e-12)
                assert model.data(index) == format_p(math.exp(lp))
                assert model.data(index, REMOVED_ROLE) is None
                assert model.data(index, Qt.ItemDataRole.BackgroundRole) != QColor(LIGHT.removed)
            else:
                # Removed: greyed from the stage that removed it on, which names itself once.
                assert lp == -math.inf and model.data(index, VALUE_ROLE) == 0.0
                assert model.data(index, REMOVED_ROLE) == cand.removed_by
                assert model.data(index, Qt.ItemDataRole.BackgroundRole) == QColor(LIGHT.removed)
                label = f"✕ {cand.removed_by}" if stage == cand.removed_by else ""
                assert model.data(index) == label
    # " Lyon" (raw rank 2) was removed by xtc; the last four by top_k.
    assert model.data(model.index(1, step.chain.index("xtc"))) == "✕ xtc"
    assert [model.data(model.index(r, step.chain.index("top_k"))) for r in range(8, 12)] == ["✕ top_k"] * 4
    # The chosen token is marked; a removed one is greyed in the row header.
    assert model.headerData(0, Qt.Orientation.Vertical).startswith("▶")
    assert model.headerData(0, Qt.Orientation.Vertical, Qt.ItemDataRole.ForegroundRole) == QColor(LIGHT.chosen)
    assert model.headerData(1, Qt.Orientation.Vertical, Qt.ItemDataRole.ForegroundRole) == QColor(LIGHT.raw)
    assert not model.headerData(2, Qt.Orientation.Vertical).startswith("▶")


def test_heat_follows_the_probability_and_the_log_toggle(inspector):
    step = chain_step()
    inspector.show_step(step)
    model = inspector.chain_view.model()
    col = step.chain.index("raw")
    light = [model.data(model.index(r, col), Qt.ItemDataRole.BackgroundRole).lightnessF() for r in range(8)]
    assert light == sorted(light)  # more likely, darker
    inspector.log_scale.setChecked(True)
    assert model.log_scale and model.heat(1e-3) == pytest.approx(0.5)


def test_unknown_entropy_and_survivors_of_an_old_step(inspector):
    from app.store.serialize import step_from_dict

    old = {
        "index": 0,
        "position": 3,
        "token_id": 1,
        "text": "b",
        "piece": "b",
        "raw_logprob": -0.5,
        "penalized_logprob": -0.4,
        "logprob": -0.2,
        "entropy_raw": 1.0,
        "entropy": 0.5,
        "forced": False,
        "params": {"temperature": 0.5, "repetition_penalty": 1.3},
        "top": [[1, "b", 2.0, -0.5, -0.4, -0.2, 0.0, 0.1, 1], [2, "c", 1.0, -1.5, -1.6, None, 0.0, 0.0, 0]],
    }
    inspector.show_step(step_from_dict(old))
    model = inspector.chain_view.model()
    assert model.headerData(1, Qt.Orientation.Horizontal) == "penalties\nH ?\nn ?"
    assert model.data(model.index(1, 2)) == "✕ temperature"


def test_double_click_in_the_chain_view_picks_that_token(qtbot, inspector):
    step = chain_step()
    inspector.show_step(step)
    inspector.show()
    view = inspector.chain_view
    with qtbot.waitSignal(inspector.token_picked) as picked:
        view.doubleClicked.emit(view.model().index(2, 3))
    assert picked.args == [inspector.candidates[2].token_id]


def server_step_without_ids() -> TokenStep:
    """A server's step that sent texts only (vLLM, SGLang, Ollama): no token ids (None)."""

    def cand(text: str, logprob: float) -> Candidate:
        return Candidate(None, text, None, (logprob,), None, None, None, None)

    top = (cand("yes", -0.25), cand("no", -1.5), cand("maybe", -2.0))
    return TokenStep(
        1, 0, None, None, "no", "no", ("raw",), (-1.5,), (None,), (None,), top, SamplingParams(), reported_stage="raw"
    )


def test_a_server_step_without_token_ids_reads_not_reported_and_picks_by_text(qtbot, inspector):
    from app.model.remote_labels import NOT_REPORTED
    from app.views.chat_view import tooltip_for

    step = server_step_without_ids()
    inspector.show_step(step)
    inspector.tabs.setCurrentIndex(1)  # the bars and the table
    table = inspector.table
    rows = {c.text: r for r, c in enumerate(inspector.candidates)}
    assert [table.item(r, 1).text() for r in range(table.rowCount())] == [NOT_REPORTED] * 3
    # The chosen token goes by its text: only "no" is bold, and it alone is the chain view's ▶.
    assert [table.item(r, 0).font().bold() for r in range(3)] == [c.text == "no" for c in inspector.candidates]
    chain = inspector.chain_view.model()
    heads = [chain.headerData(r, Qt.Orientation.Vertical) for r in range(3)]
    assert heads.count("▶ no") == 1 and "yes" in heads and "maybe" in heads
    tip = chain.headerData(rows["yes"], Qt.Orientation.Vertical, Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith(f"id {NOT_REPORTED} ·")
    # A row picked by hand stays on its token (told apart by text: all ids are None).
    table.selectRow(rows["maybe"])
    inspector.show_step(step)
    assert {i.row() for i in table.selectionModel().selectedRows()} == {rows["maybe"]}
    # Continuing from a candidate without an id: None goes out, the window reads the text.
    with qtbot.waitSignal(inspector.token_picked) as picked:
        inspector._pick_row(rows["yes"])
    assert picked.args == [None] and inspector.last_pick.text == "yes"
    hover = tooltip_for(step)
    assert "yes" in hover and "maybe" in hover and hover.count("no") == 1  # the chosen one only as the head


def test_raw_vs_final_tab_still_draws_the_bars(inspector):
    step = chain_step()
    inspector.show_step(step)
    inspector.tabs.setCurrentIndex(1)
    assert inspector.table.rowCount() == len(step.top)
    lyon = next(r for r, c in enumerate(inspector.candidates) if c.token_id == 1)
    assert inspector.table.item(lyon, 5).text() == "xtc"
    assert len(inspector.bars.raw_bars.opts["width"]) == len(step.top)


# The chain editor and presets ------------------------------------------------------------------


def test_reorder_and_switch_produce_the_samplers(qtbot, controls):
    editor = controls.chain
    assert editor.samplers() == DEFAULT_SAMPLERS and controls.current.samplers == DEFAULT_SAMPLERS
    # The grammar, a constraint left out of samplers, heads the list switched off: it runs first.
    assert [editor.list.item(r).text() for r in range(10)] == ["grammar", *DEFAULT_SAMPLERS]
    assert editor.list.item(0).checkState() == Qt.CheckState.Unchecked
    # A drag is QListWidget's InternalMove, which moves the model row: do the same.
    with qtbot.waitSignal(controls.params_changed) as changed:
        editor.list.model().moveRow(QModelIndex(), editor.order().index("xtc"), QModelIndex(), 0)
    assert changed.args[0].samplers == ("xtc", *DEFAULT_SAMPLERS[:-1])
    # The switch leaves a stage out and keeps its values.
    editor.fields["dry_multiplier"].spin.setValue(0.8)
    dry = editor.list.item(editor.order().index("dry"))
    with qtbot.waitSignal(controls.params_changed) as changed:
        dry.setCheckState(Qt.CheckState.Unchecked)
    assert "dry" not in changed.args[0].samplers
    assert changed.args[0].dry_multiplier == 0.8
    assert controls.current.samplers == ("xtc", "penalties", "temperature", *DEFAULT_SAMPLERS[3:-1])
    # The arrow buttons move the selected stage.
    editor.select_stage("temperature")
    for _ in range(4):  # past dry, penalties, the grammar and xtc
        editor.up.click()
    assert controls.current.samplers[:3] == ("temperature", "xtc", "penalties")
    # Switched back on, a stage runs where its row is.
    dry.setCheckState(Qt.CheckState.Checked)
    assert controls.current.samplers[:4] == ("temperature", "xtc", "penalties", "dry")


def test_llama_cpp_preset_sets_the_order(controls):
    names = [controls.presets.itemText(i) for i in range(controls.presets.count())]
    assert "llama.cpp order" in names
    controls.apply_preset("llama.cpp order")
    assert controls.current.samplers == LLAMA_CPP_SAMPLERS == controls.chain.samplers()
    # The stages switched on come first, in their order; any other stage follows, switched off.
    assert controls.chain.order()[1 : 1 + len(LLAMA_CPP_SAMPLERS)] == LLAMA_CPP_SAMPLERS  # after the grammar
    assert (controls.current.temperature, controls.current.top_k, controls.current.top_p) == (0.8, 40, 0.95)
    assert controls.presets.currentText() == "llama.cpp order"
    # The same values in another order are no longer that preset.
    controls.chain.move_stage("temperature", 0)
    assert controls.presets.currentText() == "Custom"
    # A built-in preset puts the default order back.
    controls.apply_preset("Balanced")
    assert controls.current.samplers == DEFAULT_SAMPLERS


def test_user_presets_keep_the_order_and_every_stage_field(controls):
    controls.apply_preset("DRY + XTC")
    assert (controls.current.dry_multiplier, controls.current.xtc_probability) == (0.8, 0.5)
    controls.chain.move_stage("xtc", 2)
    controls.chain.set_stage_on("top_k", False)
    controls.chain.fields["top_n_sigma"].spin.setValue(1.5)
    controls.chain.lists["dry_sequence_breakers"].set_lines(("\n", "::"))
    controls.chain.lists["dry_sequence_breakers"].edited.emit()
    saved = controls.current
    controls.save_preset("Mine")
    controls.apply_preset("Greedy")
    assert controls.current.samplers == DEFAULT_SAMPLERS and controls.current.dry_multiplier == 0
    controls.apply_preset("Mine")
    assert replace(controls.current, seed=None) == replace(saved, seed=None)
    assert controls.presets.currentText() == "Mine"
    # A preset saved before the chain existed has no order: it means the default one.
    controls.settings.setValue("presets", '{"Old": {"temperature": 0.5, "top_k": 7}}')
    controls._refresh_presets()
    controls.apply_preset("Old")
    assert controls.current.samplers == DEFAULT_SAMPLERS and controls.current.top_k == 7
    assert controls.current.xtc_probability == 0


def test_every_stage_parameter_has_a_field_with_its_off_value(controls):
    stage_fields = [
        "typical_p",
        "top_n_sigma",
        "xtc_probability",
        "xtc_threshold",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dynatemp_range",
        "dynatemp_exponent",
    ]
    for name in stage_fields:
        field = controls.fields[name]
        assert field.toolTip().startswith(name)
        assert "off" in field.toolTip() or "default" in field.toolTip()
    params = SamplingParams(typical_p=0.9, top_n_sigma=1.0, dynatemp_range=0.5, dry_penalty_last_n=256)
    controls.set_params(params)
    assert controls.current == params


# Errors outline their own field ------------------------------------------------------------------


def test_a_bad_value_outlines_its_field(controls):
    controls.chain.select_stage("temperature")
    controls.chain.lists["dry_sequence_breakers"].setPlainText("x" * 41)
    controls.chain.lists["dry_sequence_breakers"].edited.emit()
    assert "dry_sequence_breakers" in controls.error.text()
    assert controls.error_widget() is controls.chain.lists["dry_sequence_breakers"]
    assert controls.chain.current_stage() == "dry"  # its stage is brought into view
    dry_row = controls.chain.list.item(controls.chain.order().index("dry"))
    assert dry_row.foreground().color() == QColor("#d93025")
    before = controls.current
    assert before.dry_sequence_breakers != ("x" * 41,)
    controls.chain.lists["dry_sequence_breakers"].setPlainText("\\n\n::")
    controls.chain.lists["dry_sequence_breakers"].edited.emit()
    assert controls.error.text() == "" and controls.error_widget() is None
    assert controls.current.dry_sequence_breakers == ("\n", "::")


@pytest.mark.parametrize("field", ["xtc_threshold", "dry_base", "top_p", "max_tokens", "logit_bias", "samplers"])
def test_an_error_from_the_engine_outlines_the_field_it_names(controls, field):
    exc = SamplingParamsError(field, 0, f"{field} must be better.")
    controls.show_error(exc)
    assert controls.error.text() == f"{field} must be better."
    widget = controls.error_widget()
    expected = {"logit_bias": controls.bias, "samplers": controls.chain.list}.get(field) or controls.fields[field]
    assert widget is expected
    controls.show_error(None)
    assert controls.error_widget() is None


def test_worker_errors_carry_the_exception(qtbot):
    from app.shell.engine_thread.worker import ChatJob, EngineWorker

    bad = SamplingParamsError("logit_bias", {99999: 1.0}, "logit_bias token ids must be below 300, got 99999.")

    class RefusingSession:
        def set_enable_thinking(self, enabled):
            pass

        def start(self, messages, params):
            raise bad

        def update_params(self, request_id, params):
            raise bad

    worker = EngineWorker(session_factory=RefusingSession)
    rejected, errored = [], []
    worker.job_rejected.connect(lambda tag, exc: rejected.append((tag, exc)))
    worker.errored.connect(errored.append)
    worker.submit(ChatJob(7, ({"role": "user", "content": "hi"},), SamplingParams()))
    assert rejected == [(7, bad)] and rejected[0][1].field == "logit_bias"
    worker._tags[3] = 8
    worker.update_params(8, SamplingParams())
    assert errored == [bad]


# DRY sequence breakers as text ----------------------------------------------------------------------


def test_breakers_text_escapes():
    breakers = ("\n", ":", '"', "*", "\\", "a\tb", "\\n")
    text = format_breakers(breakers)
    assert text.split("\n") == ["\\n", ":", '"', "*", "\\\\", "a\\tb", "\\\\n"]
    assert parse_breakers(text) == breakers
    assert parse_breakers("\\n\n\n  \n\\q") == ("\n", "  ", "\\q")


# The timeline's stage selector --------------------------------------------------------------------------


def test_timeline_plots_the_chosen_stage_entropy_with_gaps(qtbot):
    from app.views.timeline import LAST_STAGE, TimelineWidget

    widget = TimelineWidget()
    qtbot.addWidget(widget)
    base = SamplingParams(temperature=0.7)
    dry = base.with_changes(dry_multiplier=0.8)
    reordered = dry.with_changes(samplers=LLAMA_CPP_SAMPLERS)
    steps = [
        simple_step(0, ("raw", "temperature"), (3.0, 2.0), base),
        simple_step(1, ("raw", "temperature"), (3.1, 2.1), base),
        simple_step(2, ("raw", "dry", "temperature"), (3.2, 2.9, 1.5), dry),
        simple_step(3, ("raw", "dry", "temperature"), (3.3, 2.8, 1.4), dry),
        simple_step(4, ("raw", "dry", "temperature"), (3.4, 2.7, 1.3), reordered),
    ]
    widget.set_steps(steps, 4)
    choices = [widget.stage.itemText(i) for i in range(widget.stage.count())]
    assert choices == [LAST_STAGE, "raw", "dry", "temperature"]
    assert widget.stage.currentText() == LAST_STAGE
    _, h = widget.entropy_curve.getData()
    assert list(h) == [2.0, 2.1, 1.5, 1.4, 1.3]
    widget.stage.setCurrentText("dry")
    x, h = widget.entropy_curve.getData()
    assert np.isnan(h[:2]).all() and list(h[2:]) == [2.9, 2.8, 2.7]
    assert len(widget.entropy_points.data) == 3
    assert widget.entropy_plot.getAxis("left").labelText == "H dry"
    widget.stage.setCurrentText("raw")
    assert list(widget.entropy_curve.getData()[1]) == [3.0, 3.1, 3.2, 3.3, 3.4]
    # A new field and a new order are parameter changes, marked where they start.
    assert [line.value() for line in widget.change_lines] == [1.5, 3.5]
    assert [line.label.toPlainText() for line in widget.change_lines] == ["dry_multiplier", "samplers"]
    # The choice survives new tokens.
    widget.set_steps(steps + [simple_step(5, ("raw", "dry", "temperature"), (3.5, 2.6, 1.2), reordered)], 5)
    assert widget.stage.currentText() == "raw"
