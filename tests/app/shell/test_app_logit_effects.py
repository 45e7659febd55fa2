"""Raw vs final shows every stage that shifts a logit: the bias, the penalties and DRY, each
in its own column and bar (issue 24: DRY took a token from 37.7 % to 21.4 % and the bias
and penalty columns stayed empty). The tiny model on the real worker and engine."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("pytestqt")

from app.views.inspector import BARS_TAB  # noqa: E402
from app.views.inspector_table import COLUMNS  # noqa: E402
from engine.api.codec import STORE, decode_step, encode_step  # noqa: E402
from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import assistant_entries, close_window, open_window, send  # noqa: E402


def dry_params(window) -> SamplingParams:
    # A strong bias makes the tiny model repeat one token, and DRY pushes back at every repeat.
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    return SamplingParams(
        max_tokens=12,
        top_logprobs=10,
        logit_bias={**no_eos, 64: 6.0},
        dry_multiplier=1.0,
        dry_sequence_breakers=("@",),
        repetition_penalty=1.3,
    )


def test_raw_vs_final_has_a_dry_column_with_the_engines_change_of_each_logit(qtbot, profile, tiny_folder):
    window = open_window(qtbot, profile, str(tiny_folder))
    send(qtbot, window, "the cat the cat the cat", dry_params(window))
    (entry,) = assistant_entries(window)
    steps = window.entries[entry].steps
    assert all(s.chain == ("raw", "bias", "penalties", "dry", "temperature") for s in steps)
    # The token DRY pushed back hardest.
    assert all(c.dry is not None for s in steps for c in s.top)
    index, step = max(enumerate(steps), key=lambda s: -min(c.dry for c in s[1].top))
    penalized = min(step.top, key=lambda c: c.dry)
    assert penalized.dry < -0.5
    # The engine's number is the change of the logit: the logprob moves by it, less the
    # normalizer's shift, which is the same for every candidate.
    dry = step.chain.index("dry")
    shifts = [c.logprobs[dry] - c.logprobs[dry - 1] - c.dry for c in step.top]
    assert max(shifts) - min(shifts) < 1e-4
    assert any(c.dry == 0.0 for c in step.top)  # tokens DRY left alone read as such

    window.select_token((window.entries[entry].stream, index))
    window.inspector.tabs.setCurrentIndex(BARS_TAB)
    window._redraw_if_dirty()
    table = window.inspector.table
    heads = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert heads == COLUMNS and heads.index("penalty") < heads.index("dry") < heads.index("count")
    row = window.inspector.candidates.index(penalized)
    assert table.item(row, heads.index("dry")).text() == f"{penalized.dry:+.3f}"
    # The token DRY pushed back is a repeat, so the repetition penalty (1.3) charged it too:
    # its penalty column is checked, not skipped when it is 0.
    assert penalized.penalty, "the repeated token has no repetition penalty"
    assert table.item(row, heads.index("penalty")).text() == f"{penalized.penalty:+.3f}"
    assert "dry" in table.copy_text().splitlines()[0].split("\t")
    bars = window.inspector.bars
    assert list(bars.dry_bars.opts["width"]) == pytest.approx([c.dry for c in window.inspector.candidates])
    assert "DRY" in bars.effect_plot.getAxis("bottom").labelText
    assert "DRY" in bars.plots.toolTip() and "temperature" in bars.plots.toolTip()

    # Saved and read back (the store's record): the same numbers after a restart.
    saved = window.model.message_of(window.entries[entry].stream).branch.steps[index]
    assert [c.dry for c in saved.top] == [c.dry for c in step.top]
    close_window(window)


def test_dry_is_written_only_where_dry_ran_and_older_records_read_as_not_recorded():
    from dataclasses import replace

    from app.views.inspector_table import dry_cell
    from tests.support.chain_steps import chain_step, simple_step

    plain = simple_step(0, ("raw", "temperature"), (1.0, 1.0), SamplingParams(temperature=0.8))
    record = encode_step(plain, STORE, plain.params.to_dict())
    assert all("dry" not in c for c in record["top"])  # records without DRY keep their bytes
    assert all(c.dry is None for c in decode_step(record).top)
    assert {dry_cell(plain, c) for c in plain.top} == {""}

    # chain_step: DRY takes 1.5 off the logit of " a" (id 3).
    step = chain_step()
    step = replace(step, top=tuple(replace(c, dry=-1.5 if c.token_id == 3 else 0.0) for c in step.top))
    record = encode_step(step, STORE, step.params.to_dict())
    assert {c["token_id"]: c["dry"] for c in record["top"]} == {c.token_id: c.dry for c in step.top}
    assert [c.dry for c in decode_step(record).top] == [c.dry for c in step.top]
    assert {dry_cell(step, c) for c in step.top} == {"", "-1.500"}
    for c in record["top"]:  # a record saved before candidates carried DRY's change
        del c["dry"]
    older = decode_step(record)
    assert all(c.dry is None for c in older.top)
    assert {dry_cell(older, c) for c in older.top} == {"not recorded"}
    assert not any(math.isnan(c.dry) for c in step.top)
