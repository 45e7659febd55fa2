"""The Sampling dock's Structured output section and the words and row the app makes of a
grammar's records (the records themselves are the engine's, tested against llguidance)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from app.model.grammar_masks import masks  # noqa: E402
from app.model.structured import GRAMMAR_PRESETS, heading_note, read_grammar_file, record_words  # noqa: E402
from app.views.controls import SamplingControls  # noqa: E402
from engine.api.grammar import GrammarRecord  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.chain_steps import chain_step  # noqa: E402


@pytest.fixture
def controls(qtbot):
    widget = SamplingControls()
    qtbot.addWidget(widget)
    return widget


def test_every_preset_compiles_and_is_sent(controls):
    for name, grammar in GRAMMAR_PRESETS.items():
        controls.structured.apply_preset(name)
        assert controls.current.grammar == grammar, name
        assert controls.errors == []
    controls.structured.kind.setCurrentIndex(controls.structured.kind.findData("json"))
    assert controls.current.grammar == ("json", "") and not controls.structured.text.isVisible()
    controls.structured.kind.setCurrentIndex(0)  # None
    assert controls.current.grammar == ()


def test_a_grammar_that_does_not_compile_is_shown_in_place_and_never_sent(controls, qtbot):
    controls.structured.apply_preset("Yes or no (regex)")
    sent = controls.current
    controls.structured.text.setPlainText("(yes|no")
    controls.structured.text.edited.emit()  # the pause after typing
    assert controls.current == sent  # the refused grammar is not sent
    assert "unclosed group" in controls.structured.error.text() and controls.structured.error.isVisibleTo(controls)
    assert controls.error_widget() is controls.structured.text
    assert "regex cannot be compiled" in controls.send_problem()
    controls.structured.text.setPlainText("(yes|no)")
    controls.structured.text.edited.emit()
    assert controls.current.grammar == ("regex", "(yes|no)") and controls.structured.error.text() == ""
    assert controls.error_widget() is None


def test_files_open_by_their_suffix_and_a_bad_one_changes_nothing(controls, tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    (tmp_path / "a.json").write_text(json.dumps(schema))
    (tmp_path / "g.lark").write_text('start: "x" | "y"\n')
    (tmp_path / "r.regex").write_text("[0-9]+\n")
    (tmp_path / "bad.gbnf").write_bytes(b"\xff\xfe\x00binary")
    assert controls.structured.open_file(str(tmp_path / "a.json"))
    assert controls.current.grammar == ("json_schema", json.dumps(schema))
    assert controls.structured.open_file(str(tmp_path / "g.lark"))
    assert controls.current.grammar == ("lark", 'start: "x" | "y"\n')
    assert controls.structured.open_file(str(tmp_path / "r.regex"))
    assert controls.current.grammar == ("regex", "[0-9]+")  # a regex file's last newline is not the regex's
    before = controls.current
    assert not controls.structured.open_file(str(tmp_path / "bad.gbnf"))
    assert "not UTF-8 text" in controls.structured.error.text() and controls.current == before
    assert not controls.structured.open_file(str(tmp_path / "missing.lark"))
    assert "cannot be read" in controls.structured.error.text()
    with pytest.raises(ValueError, match="choose a grammar kind"):
        read_grammar_file(tmp_path / "a.yaml", "")


def test_a_server_that_cannot_take_the_grammar_refuses_it_and_the_section_says_what_its_numbers_are(controls):
    controls.structured.apply_preset("Yes or no (regex)")
    controls.set_server("llama.cpp")
    assert [e.field for e in controls.errors] == ["grammar"]
    assert "does not take a regex" in controls.structured.error.text()
    assert "from before the grammar's mask" in controls.structured.note.text()
    controls.structured.apply_preset("Person (JSON schema)")
    assert controls.errors == [] and controls.current.grammar[0] == "json_schema"
    controls.set_server("mlx_lm")
    assert "does not constrain its output" in str(controls.errors[0])
    controls.set_server("")
    assert controls.errors == [] and "server" not in controls.structured.note.text()


def test_a_built_in_preset_keeps_the_grammar_and_a_saved_one_holds_it(controls):
    controls.structured.apply_preset("ISO date (regex)")
    grammar = controls.current.grammar
    controls.apply_preset("Creative")
    assert controls.current.grammar == grammar and controls.current.temperature == 1.1
    assert controls.presets.currentText() == "Creative"  # the grammar is no part of a built-in preset
    # The chain editor's grammar row: at the top, off (it runs first), its summary the grammar.
    assert controls.chain.order()[0] == "grammar" and "grammar" not in controls.current.samplers
    controls.chain.set_stage_on("grammar", True)
    controls.chain.move_stage("grammar", controls.chain.order().index("temperature"))  # to just after it
    assert controls.current.samplers.index("grammar") == controls.current.samplers.index("temperature") + 1
    controls.set_params(SamplingParams())
    assert controls.structured.value() == () and controls.chain.custom["grammar"] == ()


def record(**kw) -> GrammarRecord:
    base = {"allowed": 12, "removed": 0.9, "removed_raw": 0.9, "wanted": None}
    return GrammarRecord(**{**base, **kw})


def step(index: int, params: SamplingParams, grammar: GrammarRecord):
    return replace(chain_step(index=index, params=params), grammar=grammar)


def test_words_headings_and_the_timeline_row_from_the_records():
    params = SamplingParams(grammar=("regex", "[0-9]+"))
    steps = [
        step(0, params, record(wanted=5, removed=0.99, removed_raw=0.995)),
        step(1, params, record(allowed=1, removed=0.2, removed_raw=0.2)),
        step(2, params, record(accepting=True, removed=0.0, removed_raw=0.0)),
    ]
    words = record_words(steps[0].grammar, "Hello")
    assert "12 tokens allowed" in words and "99.0%" in words and "of raw" in words and "“Hello”" in words
    assert "(forced)" in record_words(steps[1].grammar)
    assert heading_note(steps) == "[regex: complete]"
    assert heading_note(steps[:2]) == "[regex: not complete]"
    left = [*steps[:1], step(1, params, record(left=True, allowed=99))]
    assert heading_note(left) == "[left the regex]"
    found = masks(("branch", 1), steps)
    assert (found.constrained, found.overrides, found.forced) == (3, 1, 1)
    assert found.log_kept == pytest.approx(math.log(0.005) + math.log(0.8))
    assert [r.removed for r in found.rows] == [0.99, 0.2, 0.0]
    assert "1 override" in found.summary() and "1 forced" in found.summary()
