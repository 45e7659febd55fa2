"""``mirostat_v2`` in the app, with no app code of its own: the chain editor's row (off
until switched on), its fields and summary, presets and labels, all made from its spec."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.model.presets import short_label  # noqa: E402
from app.views.chain_editor import STAGE_HELP, stage_summary  # noqa: E402
from engine.api.params import DEFAULT_SAMPLERS  # noqa: E402


def test_the_editor_lists_mirostat_off_until_it_is_switched_on(controls):
    editor = controls.chain
    assert "mirostat_v2" in editor.order() and "mirostat_v2" not in editor.samplers()
    assert controls.current.samplers == DEFAULT_SAMPLERS
    assert editor.stage_of("mirostat_tau") == editor.stage_of("mirostat_eta") == "mirostat_v2"
    assert "τ" in editor.fields["mirostat_tau"].toolTip() and "mirostat" in STAGE_HELP["mirostat_v2"].lower()

    editor.set_stage_on("mirostat_v2", True)
    editor.fields["mirostat_tau"].spin.setValue(3.0)
    assert controls.current.samplers == (*DEFAULT_SAMPLERS, "mirostat_v2")
    assert (controls.current.mirostat_tau, controls.current.mirostat_eta) == (3.0, 0.1)
    assert stage_summary("mirostat_v2", editor.values()) == ("τ 3 · η 0.1", False)
    assert "mirostat τ 3" in short_label(controls.current)

    # A built-in preset sets every stage's values and the order: mirostat is off again.
    controls.apply_preset("Balanced")
    assert "mirostat_v2" not in controls.current.samplers and controls.current.mirostat_tau == 5.0
    assert "mirostat" not in short_label(controls.current)


def test_a_moved_mirostat_row_runs_where_it_is(controls):
    editor = controls.chain
    editor.set_stage_on("mirostat_v2", True)
    editor.move_stage("mirostat_v2", 0)
    assert controls.current.samplers[0] == "mirostat_v2"
