"""A change's label on the timeline sat on the points (issue 51, #15): its place was chosen
from the two tokens either side of the line, but on a long reply the label reaches over many
more, and pyqtgraph slides it across the line with its place (left of it at the top, right of
it at the bottom). Checked on the drawn scene: no point under the label."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPointF  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import settle  # noqa: E402
from tests.support.chain_steps import chain_step  # noqa: E402

SURE, EVEN = [60.0] + [0.0] * 11, [0.0] * 12  # p 1.0, p 1/12


def test_a_change_label_covers_no_point_on_a_long_reply(timeline):
    before = SamplingParams(temperature=0.0, seed=1)
    after = SamplingParams(temperature=0.0, top_k=7, min_p=0.05, seed=1)
    change = 100
    # Low right beside the line, where the old choice looked (so it put the label at the
    # top), and at 1.0 from three tokens on, where a top label reaches.
    steps = [
        chain_step(index=i, params=after if i >= change else before, logits=EVEN if abs(i - change) <= 2 else SURE)
        for i in range(200)
    ]
    timeline.set_steps(steps, 3)
    settle(timeline)
    timeline.set_steps(steps, 3)  # drawn again at the laid-out size
    settle(timeline)
    (line,) = timeline.change_lines
    vb = timeline.prob_plot.vb
    label = line.label.mapRectToScene(line.label.boundingRect())
    p = timeline.series.p
    covered = [
        x for x in range(len(p)) if label.adjusted(-2, -2, 2, 2).contains(vb.mapViewToScene(QPointF(x, float(p[x]))))
    ]
    assert covered == [], (covered, line.label.orthoPos)
