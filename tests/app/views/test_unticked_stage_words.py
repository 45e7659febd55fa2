"""A stage unticked in the chain editor keeps its values but does nothing: the words that
describe the settings (the inspector's Settings line and tooltip, the compare tabs' short
labels) must not name it as if it ran."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.model.inspector_settings import settings_line, settings_tooltip  # noqa: E402
from app.model.presets import short_label  # noqa: E402


def test_an_unticked_dry_is_not_named_as_running(controls):
    editor = controls.chain
    editor.set_stage_on("dry", True)
    editor.fields["dry_multiplier"].spin.setValue(0.8)
    ticked = controls.current
    assert "dry" in ticked.samplers and ticked.dry_multiplier == 0.8
    assert "dry_multiplier 0.8" in settings_line(ticked)
    assert "DRY" in short_label(ticked)

    editor.set_stage_on("dry", False)  # the value stays in the field, the stage leaves the chain
    unticked = controls.current
    assert "dry" not in unticked.samplers and unticked.dry_multiplier == 0.8
    line = settings_line(unticked)
    assert "dry_multiplier" not in line and "dry" not in line.split("samplers")[0]
    assert "samplers" in line and "dry" not in line.split("samplers")[1]  # the chain it ran with
    assert "DRY" not in short_label(unticked)
    assert "dry not in the chain" in settings_tooltip(unticked)
