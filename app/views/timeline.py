"""The timeline: the whole reply at a glance.

Top: the chosen token's probability after the last stage (``p(final)``; a server's, by
its stage: ``p(penalties)``), per position. Bottom: the entropy after the stage picked
above the plots (by default each token's last; a token whose chain did not run that
stage leaves a gap). Red rings mark tokens that were not the raw argmax; dashed lines
mark where the sampling parameters changed (any value or the stage order; not the seed
alone), labelled with what changed, their tooltip giving the values (``app.views.timeline_marks``).
Clicking a point selects that token. Before the first token, a hint instead of empty axes.
The reply is labelled by what wrote it, whatever model is loaded now (``timeline_origin``):
beside the stage selector, and for a server's reply a note in the entropy plot that the
server does not report it (neither takes the plots' height). The plots are rows of
``app.views.timeline_rows.PlotRows``; other rows (a scored text's surprisal, a comparison's
KLD, the logit lens) are added with ``add_row``.

A compare run shows a curve per column on top, and below the Jensen–Shannon divergence
of the columns' final distributions per token (the mean over pairs), the first token
where two columns drew differently marked. Bound to the model, it follows the selection
and redraws on the window's clock; per-token values are kept in ``StreamSeries``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QComboBox, QGraphicsSimpleTextItem, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.model.entries import latest_token
from app.model.remote_labels import p_label
from app.model.scored import is_scored
from app.model.timeline_series import LAST_STAGE, StreamSeries, nearest, token_range
from app.views.theme import LIGHT, Colors
from app.views.throttle import RedrawClock, own_clock
from app.views.timeline_marks import change_marker, fit_p_range, place_labels
from app.views.timeline_origin import OriginLabels
from app.views.timeline_phase import PhaseMarks
from app.views.timeline_rows import PlotRows
from app.views.timeline_run import RunPlots
from engine.api.events import TokenStep
from engine.api.params import STAGE_NAMES

if TYPE_CHECKING:
    from app.model.chat import ChatModel

TIMELINE_MS = 100
"""While a reply streams the plots are redrawn at most 10 times a second (the chat, 30):
repainting them is most of the GUI's cost per token, and a curve needs no more."""
MAX_DOTS = 1000
"""A reply longer than this is drawn as curves without a dot per token."""
EMPTY_HINT = "Send a message: each token's probability (top) and the model's uncertainty, its entropy (below), appear here as the reply is written. Click a point to inspect that token."  # noqa: E501
NO_SELECTION_HINT = "No token selected: click a token of a reply in the chat to see the whole reply here."


class TimelineWidget(QWidget):
    """One reply (``set_steps``) or one compare run (``set_run``): the top plot is each
    token's final probability (a curve per column of a run), the bottom one the entropy
    after the chosen stage, or for a run the divergence between its columns."""

    token_selected = Signal(int)  # token index of the reply shown
    rows_changed = Signal(int)  # how many plots it shows (2, and 3 with a scored text, …)
    column_token_selected = Signal(int, int)  # column, token index of the run shown

    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.steps: list[TokenStep] = []
        self.selected: int | None = None
        self.run_mode = False
        self._x_range: tuple[float, float] | None = None
        self.series = StreamSeries()
        self._drawn_stage = ""
        self._drawn_steps: list[TokenStep] | None = None
        self._dots_drawn = 0
        self._antialias = True
        self.model: ChatModel | None = None
        self.view = pg.GraphicsLayoutWidget()
        self.toolbar = QWidget()
        self.rows = PlotRows(self.view, self, self.toolbar)
        self.prob_plot = self.rows.add(0, "p(final)")
        self.entropy_plot = self.rows.add(1, "H last stage")
        fit_p_range(self.prob_plot)
        self.prob_plot.vb.sigResized.connect(lambda _vb: fit_p_range(self.prob_plot))  # pixels of margin
        self.prob_plot.vb.sigResized.connect(self._place_change_labels)  # a label's reach is in pixels
        self.prob_curve = self.prob_plot.plot([], [])
        self.prob_points = pg.ScatterPlotItem(size=7)
        self.prob_plot.addItem(self.prob_points)
        self.argmax_marks = pg.ScatterPlotItem(size=13, brush=None)
        self.prob_plot.addItem(self.argmax_marks)
        self.entropy_curve = self.entropy_plot.plot([], [])
        self.entropy_points = pg.ScatterPlotItem(size=5)
        self.entropy_plot.addItem(self.entropy_points)
        self.selection_line = pg.InfiniteLine(angle=90, movable=False)
        self.prob_plot.addItem(self.selection_line)
        self.change_lines: list[pg.InfiniteLine] = []
        self.phase = PhaseMarks(self.prob_plot, self.entropy_plot)  # a reasoning reply's thinking and answer
        # A compare run: a curve per column, the divergence curve and the first difference.
        self.run = RunPlots(self.prob_plot, self.entropy_plot)
        self.view.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self.stage = QComboBox()
        self.stage.addItem(LAST_STAGE)
        self.stage.setToolTip("The stage whose entropy the lower plot shows")
        self.stage.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.stage.currentTextChanged.connect(lambda _: self.set_steps(self.steps, self.selected))
        self.stage_label = QLabel("Entropy after")
        self.entropy_note = QGraphicsSimpleTextItem("", self.entropy_plot.vb)  # in pixels, not data
        self.entropy_plot.vb.sigResized.connect(lambda _vb: self._place_entropy_note())
        self.origin = OriginLabels(self._set_entropy_note)  # what wrote the reply shown
        self.hint = QLabel(EMPTY_HINT)  # before the first token: words, not empty 0–1 axes
        self.hint.setWordWrap(True)
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setContentsMargins(24, 12, 24, 12)
        bar = QHBoxLayout(self.toolbar)
        bar.setContentsMargins(6, 0, 6, 0)
        bar.addWidget(self.stage_label)
        bar.addWidget(self.stage)
        bar.addWidget(self.run.legend)
        bar.addWidget(self.phase.legend)
        bar.addStretch(1)
        bar.addWidget(self.origin.label, 100)  # the room left, right-aligned
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.toolbar)
        layout.addWidget(self.view)
        layout.addWidget(self.hint, 1)
        self.set_colors(LIGHT)
        self._show_mode(False)
        self._show_empty(True)
        self.rows.changed = self.rows_changed.emit
        self.rows.fit()  # the toolbar is filled now: its height counts

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self.rows.fit()  # the token axis is titled where the rows have room for it

    def add_row(self, row: int, title: str, shorter: Sequence[str] = ()) -> pg.PlotItem:
        """A plot in ``row`` below the others, X-linked to them (``app.views.timeline_rows``)."""
        return self.rows.add(row, title, shorter)

    def _set_entropy_note(self, text: str) -> None:
        """Words inside the entropy plot (a server's reply: its entropy is not reported)."""
        self.entropy_note.setText(text)
        self._place_entropy_note()

    def _place_entropy_note(self) -> None:
        box, text = self.entropy_plot.vb.boundingRect(), self.entropy_note.boundingRect()
        self.entropy_note.setPos(box.center().x() - text.width() / 2, box.center().y() - text.height() / 2)

    def set_colors(self, colors: Colors) -> None:
        self.colors = colors
        self.view.setBackground(colors.background)
        self.entropy_note.setBrush(QColor(colors.muted))
        palette = self.hint.palette()
        palette.setColor(QPalette.ColorRole.WindowText, QColor(colors.muted))
        self.hint.setPalette(palette)
        self.origin.label.setPalette(palette)
        self.prob_curve.setPen(pg.mkPen(colors.final, width=1.5))
        self.entropy_curve.setPen(pg.mkPen(colors.raw, width=1.5))
        self.argmax_marks.setPen(pg.mkPen(colors.marker, width=2))
        self.selection_line.setPen(pg.mkPen(colors.chosen, width=1))
        self.phase.set_colors(colors)
        self.run.set_colors(colors)
        self.rows.set_colors(colors.foreground)
        if self.run_mode:
            self._redraw_run()
        else:
            self.series.reset(None)
            self._drawn_stage = ""
            for line in self.change_lines:  # drawn again in the new colour
                self.prob_plot.removeItem(line)
            self.change_lines = []
            self.set_steps(self.steps, self.selected)

    def _show_mode(self, run: bool) -> None:
        self.run_mode = run
        for item in (self.prob_curve, self.prob_points, self.argmax_marks, self.entropy_curve, self.entropy_points):
            item.setVisible(not run)
        for line in self.change_lines:
            line.setVisible(not run)
        self.run.show(run)
        self.stage_label.setVisible(not run)
        self.stage.setVisible(not run)
        if run:
            self.phase.hide()
        self.entropy_plot.setLabel("left", "JS (nats)" if run else f"H {self.stage.currentText()}")

    def _show_empty(self, empty: bool) -> None:
        """Nothing to plot: the hint instead of the plots and their stage selector."""
        if self.hint.isVisibleTo(self) != empty or self.view.isVisibleTo(self) == empty:
            self.hint.setVisible(empty)
            self.view.setVisible(not empty)
            self.toolbar.setVisible(not empty)

    def _update_stage_choices(self, stages: set[str]) -> None:
        choices = [LAST_STAGE, *(stage for stage in STAGE_NAMES if stage in stages)]
        current = self.stage.currentText()
        if [self.stage.itemText(i) for i in range(self.stage.count())] == choices:
            return
        self.stage.blockSignals(True)
        self.stage.clear()
        self.stage.addItems(choices)
        # A stage picked earlier stays picked while some reply still runs it.
        self.stage.setCurrentText(current if current in choices else LAST_STAGE)
        self.stage.blockSignals(False)

    # The model --------------------------------------------------------------------------------

    def bind(self, model: ChatModel, clock: RedrawClock | None = None) -> None:
        """Follow the model's selection: its reply, or the compare run it is a column of."""
        self.model = model
        self.redraws = own_clock(self, clock).throttler(self._redraw_from_model, TIMELINE_MS)
        for name in ("entries_changed", "tokens_added", "divergence_added"):
            getattr(model.events, name).connect(self._on_model_event)
        model.events.selection_changed.connect(self._on_selection_changed)
        self.token_selected.connect(model.select_index)
        self.column_token_selected.connect(model.select_column)
        self._redraw_from_model()

    def _on_model_event(self, *_args) -> None:
        self.redraws.request()

    def _on_selection_changed(self, _ref) -> None:
        # A token picked by hand is shown at once; one followed as a reply streams, on the clock.
        self.redraws.request(urgent=not self.model.follow_latest)

    def _redraw_from_model(self) -> None:
        model = self.model
        self._set_antialias(not model.busy())
        selection = model.selection
        run = model.shown_run()
        shown = run.columns[0].stream if run is not None and run.columns else None
        self.origin.show(model.origin_of(shown or (selection[0] if selection is not None else None)))
        if run is not None:
            columns = [model.steps_of(c.stream) or [] for c in run.columns]
            column = run.column_of(selection[0]) if selection is not None else None
            selected = (column, selection[1]) if column is not None else None
            labels = [run.label(i) for i in range(len(run.columns))]
            divergence = run.divergence
            self.set_run(columns, labels, run.prefix_tokens, divergence.mean(), divergence.first(), selected)
            return
        steps = model.steps_of(selection[0]) if selection is not None else None
        nothing = selection is None and latest_token(model.entries) is not None  # a reply cancelled early
        self.hint.setText(NO_SELECTION_HINT if nothing else EMPTY_HINT)
        self.set_steps(steps or [], selection[1] if selection is not None else None)

    def _set_antialias(self, on: bool) -> None:
        """Curves are smoothed except while replies stream: unsmoothed they repaint in about
        two thirds of the time, and the last redraw after the reply smooths them again."""
        if on == self._antialias:
            return
        self._antialias = on
        for item in (self.prob_curve, self.entropy_curve, *self.run.curves()):
            item.opts["antialias"] = on
            item.curve.opts["antialias"] = on
            item.curve.update()
        if on and not self.run_mode:
            self._set_x_range(self.series.x)  # and fitted to the finished reply

    # A compare run ---------------------------------------------------------------------------

    def set_run(
        self,
        columns: list[list[TokenStep]],
        labels: list[str],
        start: int,
        divergence: tuple[list[int], list[float]],
        first_difference: int | None,
        selected: tuple[int, int] | None,
    ) -> None:
        """Columns of a compare run from token ``start`` on (:meth:`RunPlots.set`)."""
        self.run.set(columns, labels, start, divergence, first_difference, selected)
        self._show_empty(False)
        if not self.run_mode:
            self._show_mode(True)
        self._redraw_run()

    def _redraw_run(self) -> None:
        x, selected = self.run.redraw(self.colors, self._antialias)
        self._set_x_range(x)
        if selected is not None:
            self._place_selection(*selected)
        else:
            self.selection_line.hide()

    # One reply -------------------------------------------------------------------------------

    def set_steps(self, steps: list[TokenStep], selected: int | None) -> None:
        if self.run_mode:
            self._show_mode(False)
        self._show_empty(not steps)
        self.steps, self.selected = steps, selected
        series = self.series
        changed = steps is not series.steps or len(steps) != series.n
        series.update(steps)
        # A server's numbers: by their stage; a scored text's: raw (after the panel's chain its
        # given tokens read as removed, while its colours and perplexity are raw).
        name = ("p(raw)" if is_scored(steps[-1]) else p_label(steps[-1])) if steps else "p(final)"
        if self.prob_plot.getAxis("left").labelText != name:  # an axis label costs a relayout
            self.prob_plot.setLabel("left", name)
        self._update_stage_choices(series.stages)
        stage = self.stage.currentText()
        if changed or stage != self._drawn_stage:
            full = stage != self._drawn_stage or series.n < self._dots_drawn or steps is not self._drawn_steps
            if stage != self._drawn_stage:
                self.entropy_plot.setLabel("left", f"H {stage}")  # an axis label costs a relayout
            self._drawn_stage, self._drawn_steps = stage, steps
            self._draw_series(series, stage, full)
        self._place_selection(steps, selected)

    def _draw_series(self, series: StreamSeries, stage: str, full: bool) -> None:
        x, p, h = series.x, series.p, series.entropies(stage)
        # NaN breaks the line: a gap where the stage did not run (or its entropy is unknown).
        self.prob_curve.setData(x, p)
        self.entropy_curve.setData(x, h, connect="finite")
        # Dots are appended (pyqtgraph's addPoints styles only the new ones); beyond
        # MAX_DOTS tokens the curves are drawn alone.
        start = 0 if full else self._dots_drawn
        if full or series.n > MAX_DOTS >= start:
            for item in (self.prob_points, self.entropy_points, self.argmax_marks):
                item.clear()
            start = 0
        if series.n <= MAX_DOTS:
            new = slice(start, series.n)
            ran = start + np.flatnonzero(np.isfinite(h[new]))
            marks = series.not_argmax
            marks = marks[marks >= start]
            self.prob_points.addPoints(x=x[new], y=p[new], brush=pg.mkBrush(self.colors.final), pen=None)
            self.entropy_points.addPoints(x=x[ran], y=h[ran], brush=pg.mkBrush(self.colors.raw), pen=None)
            if len(marks):
                self.argmax_marks.addPoints(x=x[marks], y=p[marks])
        self._dots_drawn = series.n
        self.phase.update(self.steps, x, p, h)
        if [line.value() for line in self.change_lines] != [series.x[i] - 0.5 for i in series.changes]:
            self._draw_changes(series)
        self._set_x_range(x)
        self._place_change_labels()

    def _draw_changes(self, series: StreamSeries) -> None:
        steps = series.steps
        for line in self.change_lines:
            self.prob_plot.removeItem(line)
        self.change_lines = []
        for i in series.changes:
            line = change_marker(steps[i - 1].params, steps[i].params, steps[i].index, self.colors)
            self.prob_plot.addItem(line)
            self.change_lines.append(line)

    def _place_change_labels(self, *_args) -> None:
        """Each change's label off the points, at the plot's present size and token range."""
        series = getattr(self, "series", None)
        if getattr(self, "change_lines", None) and series is not None and series.n:
            place_labels(self.change_lines, self.prob_plot.vb, series.x, series.p)

    def _set_x_range(self, x: np.ndarray) -> None:
        """Show every token (``token_range``); the axis is set only when its range changes."""
        if len(x) == 0:
            self.prob_plot.enableAutoRange(x=True)
            return
        current, self._x_range = self._x_range, token_range(x, self._x_range, streaming=not self._antialias)
        if self._x_range != current:
            self.prob_plot.setXRange(self._x_range[0] - 0.5, self._x_range[1] + 0.5, padding=0)

    def _place_selection(self, steps: list[TokenStep], selected: int | None) -> None:
        if selected is not None and 0 <= selected < len(steps):
            self.selection_line.setPos(steps[selected].index)
            self.selection_line.show()
        else:
            self.selection_line.hide()

    # Clicks ---------------------------------------------------------------------------------------

    def _on_scene_clicked(self, event) -> None:
        """A click on either plot selects the nearest token (of the nearest curve in a run)."""
        for plot in (self.prob_plot, self.entropy_plot):
            if not plot.sceneBoundingRect().contains(event.scenePos()):
                continue
            point = plot.vb.mapSceneToView(event.scenePos())
            if self.run_mode:
                picked = self.run.pick(point.x(), point.y() if plot is self.prob_plot else None)
                if picked is not None:
                    self.column_token_selected.emit(*picked)
            else:
                index = nearest(self.steps, point.x())
                if index is not None:
                    self.token_selected.emit(index)
            return
