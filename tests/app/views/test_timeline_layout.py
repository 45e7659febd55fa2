"""The timeline's layout on short plots (issue 24, point 21), on hand-built steps: value
labels a label's height apart however short the plot, a marker that can be hovered, an
export at a readable size, and the token axis under the lowest row only."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPointF, QRectF  # noqa: E402
from PySide6.QtGui import QImage, QPainter  # noqa: E402

from engine.api.params import SamplingParams  # noqa: E402
from tests.support.app_window import settle  # noqa: E402
from tests.support.chain_steps import chain_step  # noqa: E402

ENTROPY_RANGES = {"0–2.4 nats": (0.0, 2.4), "0–0.3 nats": (0.0, 0.3), "1.00–1.03 nats": (1.0, 1.03)}


def steps_with_entropies(low: float, high: float, n: int = 40) -> list:
    """``n`` steps whose entropy after every stage runs from ``low`` to ``high`` and back."""
    steps = []
    for i in range(n):
        h = low + (high - low) * abs((i % 10) - 5) / 5
        step = chain_step(index=i)
        steps.append(replace(step, entropies=tuple(h for _ in step.chain)))
    return steps


def shown_plots(timeline) -> list:
    """The timeline's plots shown, top to bottom."""
    import pyqtgraph as pg

    plots = [item for item in timeline.view.ci.items if isinstance(item, pg.PlotItem) and item.isVisible()]
    return sorted(plots, key=lambda plot: plot.sceneBoundingRect().top())


def drawn_labels(axis) -> list:
    """The rectangles of the tick labels the axis draws (pyqtgraph's own draw specs)."""
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        _axis, _ticks, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [rect for rect, _flags, _text in texts]


@pytest.mark.parametrize("span", list(ENTROPY_RANGES))
def test_value_labels_never_overprint_on_short_plots(qtbot, timeline, span):
    """The entropy axis wrote "2 1 0" on top of each other when its range was narrow and
    the plot short: labelled ticks are now spaced by the labels' height, on every row."""
    timeline.set_steps(steps_with_entropies(*ENTROPY_RANGES[span]), 3)
    for height in (max(timeline.minimumHeight(), 100), 140, 170, 200, 260):
        timeline.resize(1400, height)
        settle(timeline)
        for plot in shown_plots(timeline):
            axis = plot.getAxis("left")
            rects = sorted(drawn_labels(axis), key=lambda r: r.top())
            for above, below in zip(rects, rects[1:], strict=False):
                assert below.top() >= above.bottom(), (span, height, axis.labelText, rects)


def test_titles_fit_their_rows(qtbot, timeline):
    """A left-axis title longer than its plot is tall shows a shorter form (its tooltip the
    whole): "H last stage" was cut off on a short timeline."""
    timeline.set_steps(steps_with_entropies(0.0, 2.4), 3)
    for height in (max(timeline.minimumHeight(), 100), 200, 400):
        timeline.resize(1400, height)
        settle(timeline)
        for plot in shown_plots(timeline):
            axis = plot.getAxis("left")
            title = axis.label.mapRectToScene(axis.label.boundingRect())
            frame = axis.mapRectToScene(QRectF(0, 0, axis.width(), axis.height()))  # its own, not its grid's
            assert frame.top() - 1 <= title.top() and title.bottom() <= frame.bottom() + 1, (height, axis.labelText)
    assert timeline.entropy_plot.getAxis("left").labelText == "H last stage"  # the whole title kept


def test_token_numbers_only_under_the_lowest_row(qtbot, timeline):
    from app.views.score_views import SurprisalRow

    steps = steps_with_entropies(0.0, 2.4)
    timeline.set_steps(steps, 3)
    row = SurprisalRow(timeline)
    for shown in (False, True):
        row.show(steps if shown else None)
        settle(timeline)
        plots = shown_plots(timeline)
        assert plots[-1] is (row.plot if shown else timeline.entropy_plot)
        for plot in plots:
            axis = plot.getAxis("bottom")
            assert axis.style["showValues"] == (plot is plots[-1])
            assert (axis.labelText == "token") == (plot is plots[-1])


def test_a_change_marker_can_be_hovered(qtbot, timeline):
    """The dashed line where the settings changed mid-reply (its tooltip says what
    changed) could be hovered only on its 1–2 px; it is hovered 4 px either side now."""
    changed = SamplingParams(temperature=1.2, top_k=7, seed=3)
    steps = [chain_step(index=i, params=changed if i >= 5 else None) for i in range(20)]
    timeline.set_steps(steps, 3)
    settle(timeline)
    (line,) = timeline.change_lines
    scene = timeline.view.scene()
    vb = timeline.prob_plot.vb
    middle = vb.mapViewToScene(QPointF(line.value(), 0.5))
    for dx in (-4, -2, 0, 2, 4):
        point = QPointF(middle.x() + dx, middle.y())
        assert line in scene.items(point), dx
    far = QPointF(middle.x() + 12, middle.y())
    assert line not in scene.items(far)
    assert "temperature" in line.toolTip()


def test_an_exported_timeline_is_readable(qtbot, timeline, tmp_path):
    """Exported from a timeline docked 160 px high, the PNG was 1400×136: a few pixels a
    row. It is drawn at least 1200 wide and 180 px a row, and the dock keeps its size."""
    import re

    from app.views.plot_export import save_plot

    timeline.resize(1400, 160)
    timeline.set_steps(steps_with_entropies(0.0, 2.4), 3)
    settle(timeline)
    before = timeline.view.size()
    for name in ("t.png", "t.svg"):
        save_plot(timeline.view, tmp_path / name)
        assert timeline.view.size() == before
    rows = len(shown_plots(timeline))
    image = QImage(str(tmp_path / "t.png"))
    assert image.width() >= 1200 and image.height() >= rows * 180, image.size()
    box = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', (tmp_path / "t.svg").read_text())
    assert box is not None and float(box[1]) >= 1200 and float(box[2]) >= rows * 180, box


def test_the_p_axis_has_its_ticks_whole_points_and_labels_off_the_points(qtbot, timeline):
    """Issue 35: the p axis had one tick (0.5), points at 1.0 were cut at the range's top,
    and a change's label sat on the points beside it."""
    from app.views.timeline_marks import RING_PX

    greedy, changed = SamplingParams(temperature=0.0, seed=1), SamplingParams(temperature=0.0, top_k=7, seed=1)
    sure = [60.0] + [0.0] * 11  # the chosen token (0) all but certain: p 1.0
    steps = [chain_step(index=i, params=changed if i >= 10 else greedy, logits=sure) for i in range(20)]
    timeline.set_steps(steps, 3)
    timeline.resize(1400, 200)  # the timeline's default height
    settle(timeline)
    p = timeline.series.p
    assert len(p) == len(steps) and (p == 1.0).all(), p  # every point at 1.0
    axis = timeline.prob_plot.getAxis("left")
    assert len(drawn_labels(axis)) >= 3, drawn_labels(axis)  # 0, 0.5 and 1 labelled
    vb = timeline.prob_plot.vb
    low, high = vb.viewRange()[1]
    top = vb.mapViewToScene(QPointF(0, high)).y()
    assert vb.mapViewToScene(QPointF(0, 1.0)).y() - top >= RING_PX - 0.5  # a ring at 1.0 drawn whole
    assert low < 0
    (line,) = timeline.change_lines
    label = line.label.mapRectToScene(line.label.boundingRect())
    for x in range(7, 13):  # the points beside the label
        point = vb.mapViewToScene(QPointF(x, float(p[x])))
        assert not label.adjusted(-4, -4, 4, 4).contains(point), (x, label, point)
