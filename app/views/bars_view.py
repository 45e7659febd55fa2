"""Raw vs final: one token's candidates as bars, the bias, penalty and DRY effect, and the numbers.

Left: two bars per candidate (``raw`` probability in grey, after the last stage —
"final" — in colour), the chosen token outlined, tokens a stage removed shown with
their raw bar only, a ✕ after their name and, where there is room, "removed by
<stage>". Right: the change of each candidate's logit made by every stage that shifts
logits — the bias, the penalties and DRY — and its count in the penalty window
(temperature scales every logit alike: the Chain tab shows it). Below: the exact numbers
(``app.views.inspector_table``). What depends on the plots' size — which rows are named,
the notes, the x range that leaves them room, the axis titles — is laid out again
whenever the plots are resized (``_layout``).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.model.inspector_settings import COUNT_NOTE, DRY_NOTE, GREEDY_NOTE, TEMPERATURE_NOTE
from app.model.remote_labels import NOT_REPORTED, is_chosen, p_label
from app.model.textfmt import prob, visible
from app.views.chain_view import LOG_FLOOR
from app.views.inspector_labels import LabelPool, elide, fit_text, row_stride, thinned_rows
from app.views.inspector_table import COLUMNS, CandidateTable  # noqa: F401 (COLUMNS: re-exported)
from app.views.plot_axes import CentredAxis
from app.views.theme import LIGHT, Colors
from engine.api.events import Candidate, TokenStep

NOTE_ROOM = 2.5
"""The x range may grow to this many times the widest bar to leave "removed by" notes room."""


def _finite(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


class BarsView(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.colors: Colors = LIGHT
        self.log_scale = False
        self.step: TokenStep | None = None
        self.candidates: list[Candidate] = []
        self.xmax = 1.0
        self._laying_out = self._again = False
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground(self.colors.background)
        # Titles fitted to the plots' widths are centred again when they change (CentredAxis).
        self.bars_plot = self.plots.addPlot(row=0, col=0, axisItems={"bottom": CentredAxis("bottom")})
        self.effect_plot = self.plots.addPlot(row=0, col=1, axisItems={"bottom": CentredAxis("bottom")})
        self.plots.ci.layout.setColumnStretchFactor(0, 3)
        self.plots.ci.layout.setColumnStretchFactor(1, 2)
        for plot in (self.bars_plot, self.effect_plot):
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.invertY(True)
            plot.vb.sigResized.connect(lambda _vb: self._layout())
        self.effect_plot.setYLink(self.bars_plot)
        self.bars_plot.getAxis("left").setStyle(tickFont=self.font(), autoExpandTextSpace=False)
        # Items are made once and updated with setOpts/setData: rebuilding them costs
        # ~20 ms a redraw, which the GUI thread cannot spare while tokens stream in.
        self.raw_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.final_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.bias_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.penalty_bars = pg.BarGraphItem(x0=0, y=[], height=0.34, width=[])
        self.dry_bars = pg.BarGraphItem(x0=0, y=[], height=0.22, width=[])
        self.zero_line = pg.InfiniteLine(pos=0, angle=90, pen=pg.mkPen(LIGHT.raw))
        for item in (self.raw_bars, self.final_bars):
            self.bars_plot.addItem(item)
        for item in (self.bias_bars, self.penalty_bars, self.dry_bars, self.zero_line):
            self.effect_plot.addItem(item)
        self.notes = LabelPool(self.bars_plot)
        self.counts = LabelPool(self.effect_plot)
        self.effect_plot.getAxis("left").setStyle(showValues=False)

        self.table = CandidateTable()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plots, 3)
        layout.addWidget(self.table, 2)
        self._layout()

    def show_step(self, step: TokenStep | None, candidates: list[Candidate], colors: Colors, log_scale: bool) -> None:
        """``candidates``: the step's candidates in the order to draw them (raw rank);
        ``step`` None clears everything (no selection)."""
        self.step, self.candidates, self.log_scale = step, candidates if step is not None else [], log_scale
        if colors != self.colors:
            self.colors = colors
            self.plots.setBackground(colors.background)
        if step is None:
            for bars in (self.raw_bars, self.final_bars, self.bias_bars, self.penalty_bars, self.dry_bars):
                bars.setOpts(y=[], width=[])
        else:
            self._draw_bars()
            self._draw_effects()
        self.table.fill(step, self.candidates, self.colors)
        self._layout()

    def row_at_scene(self, scene_pos: QPointF) -> int | None:
        for plot in (self.bars_plot, self.effect_plot):
            if plot.sceneBoundingRect().contains(scene_pos):
                row = int(round(plot.vb.mapSceneToView(scene_pos).y()))
                return row if 0 <= row < len(self.candidates) else None
        return None

    # Drawing ---------------------------------------------------------------------

    def _value(self, logprob: float | None) -> float:
        if self.log_scale:
            finite = logprob is not None and math.isfinite(logprob)
            return (max(LOG_FLOOR, logprob / math.log(10)) - LOG_FLOOR) if finite else 0.0
        return prob(logprob)

    def _raw_values(self) -> list[float]:
        # A server reports one stage: "raw" is drawn only where that stage is raw.
        step = self.step
        if step is None or step.stage_index("raw") is None:
            return [0.0] * len(self.candidates)
        return [self._value(step.logprob_at("raw", cand)) for cand in self.candidates]

    def _draw_bars(self) -> None:
        c, cands, step = self.colors, self.candidates, self.step
        y = np.arange(len(cands), dtype=float)
        raw = self._raw_values()
        final = [self._value(cand.logprob) for cand in cands]
        chosen_pen = pg.mkPen(c.chosen, width=2)
        none_pen = pg.mkPen(None)
        raw_brushes = [pg.mkBrush(c.raw) for _ in cands]
        final_brushes = [pg.mkBrush(c.chosen if is_chosen(step, cand) else c.final) for cand in cands]
        pens = [chosen_pen if is_chosen(step, cand) else none_pen for cand in cands]
        self.raw_bars.setOpts(y=y - 0.18, width=raw, brushes=raw_brushes, pens=pens)
        self.final_bars.setOpts(y=y + 0.18, width=final, brushes=final_brushes, pens=pens)
        if self.log_scale:
            self.xmax = -LOG_FLOOR
            self.bars_plot.getAxis("bottom").setTicks(
                [[(v, f"{v + LOG_FLOOR:g}") for v in range(0, int(-LOG_FLOOR) + 1)]]
            )
        else:
            self.xmax = max([*raw, *final, 0.05]) * 1.1
            self.bars_plot.getAxis("bottom").setTicks(None)
        self.bars_plot.vb.disableAutoRange()
        self.bars_plot.setYRange(-0.6, max(len(cands) - 0.4, 0.6), padding=0)

    def _draw_effects(self) -> None:
        """One bar per logit-shifting stage and candidate: bias and penalty, and DRY's
        between them where it ran (three thinner bars a row)."""
        c, cands = self.colors, self.candidates
        y = np.arange(len(cands), dtype=float)
        reported = self._effects_reported()
        bias = [cand.bias or 0.0 if reported else 0.0 for cand in cands]
        penalty = [cand.penalty or 0.0 if reported else 0.0 for cand in cands]
        # A DRY penalty past float32 is -inf: the table says so, a bar cannot.
        dry = [_finite(cand.dry) if reported and self._dry_ran() else 0.0 for cand in cands]
        offset, height = (0.24, 0.22) if self._dry_ran() else (0.18, 0.34)
        self.bias_bars.setOpts(y=y - offset, width=bias, height=height, brush=pg.mkBrush(c.bias))
        self.penalty_bars.setOpts(y=y + offset, width=penalty, height=height, brush=pg.mkBrush(c.penalty))
        self.dry_bars.setOpts(y=y, width=dry, height=height, brush=pg.mkBrush(c.dry))
        self.zero_line.setPen(pg.mkPen(c.raw))
        extent = max([abs(v) for v in bias + penalty + dry] + [0.5])
        self.effect_plot.vb.disableAutoRange()
        self.effect_plot.setXRange(-extent * 1.1, extent * 1.1, padding=0)

    def _dry_ran(self) -> bool:
        return self.step is not None and self.step.stage_index("dry") is not None

    def _effects_reported(self) -> bool:
        return not any(cand.bias is None or cand.penalty is None for cand in self.candidates)

    # Layout: what depends on the plots' size ------------------------------------------

    def _layout(self) -> None:
        """Name the rows a line apart, place the notes and counts, fit the axis titles.
        A resize caused by the layout itself (the axis' new width) lays out once more after."""
        if self._laying_out:
            self._again = True
            return
        for _ in range(2):  # once, and once more if the first resized the plots
            self._laying_out, self._again = True, False
            try:
                self._place_labels()
            finally:
                self._laying_out = False
            if not self._again:
                break

    def _place_labels(self) -> None:
        self.notes.begin()
        self.counts.begin()
        axis = self.bars_plot.getAxis("left")
        if self.step is None:
            axis.setTicks([[]])
        else:
            line = QFontMetrics(self.font()).height()
            stride = row_stride(len(self.candidates), self.bars_plot.vb.height(), line)
            chosen = next((r for r, cand in enumerate(self.candidates) if is_chosen(self.step, cand)), None)
            rows = thinned_rows(len(self.candidates), stride, chosen)
            self._name_rows(rows)
            self._place_notes(stride)
            self._place_counts(rows)
        self.notes.end()
        self.counts.end()
        self._fit_titles()

    def _name_rows(self, rows: list[int]) -> None:
        names = []
        for r in rows:
            cand = self.candidates[r]
            names.append((r, elide(visible(cand.text)) + ("  ✕" if cand.logprob == -math.inf else "")))
        axis = self.bars_plot.getAxis("left")
        axis.setTicks([names])
        # A fixed width from the names themselves: the axis otherwise drops a name wider than
        # its last width until the next paint (names went missing after a branch).
        widest = max((QFontMetrics(self.font()).horizontalAdvance(n) for _, n in names), default=0)
        axis.setWidth(widest + 14)

    def _place_notes(self, stride: int) -> None:
        """ "removed by <stage>" beside each removed token's raw bar, where rows are a line
        apart and the note fits inside the plot (the x range grows to make room)."""
        width = self.bars_plot.vb.width()
        raw = self._raw_values()
        xmax = self.xmax
        notes = []
        if stride == 1 and width > 0:
            metrics = QFontMetrics(self.font())
            for r, cand in enumerate(self.candidates):
                if cand.logprob != -math.inf:  # a note for removed tokens only (None: not reported)
                    continue
                text = f"removed by {cand.removed_by}" if cand.removed_by else "removed"
                room = width - metrics.horizontalAdvance(text) - 12
                need = max(raw[r], 0.0) * width / room if room > 0 else math.inf
                notes.append((r, text, need))
            xmax = max([xmax, *(need for _, _, need in notes if need <= self.xmax * NOTE_ROOM)])
        self.bars_plot.setXRange(0, xmax, padding=0)
        pad = 4 * xmax / width if width > 0 else 0.0
        for r, text, need in notes:
            if need <= xmax:
                self.notes.place(text, self.colors.raw, max(raw[r], 0.0) + pad, r)

    def _place_counts(self, rows: list[int]) -> None:
        if not self._effects_reported():
            self.counts.place(f"bias, penalty, count: {NOT_REPORTED}", self.colors.raw, -0.5, 0)
            return
        for r in rows:
            if (self.candidates[r].count or 0) > 0:
                self.counts.place(f"×{self.candidates[r].count}", self.colors.foreground, 0, r)

    def _fit_titles(self) -> None:
        step = self.step
        last = step.chain[-1] if step is not None else "the last stage"
        if self.log_scale:
            choices = [f"log10 p (from {LOG_FLOOR:g})", "log10 p"]
        else:
            raw_words = "raw (grey)" if step is None or step.stage_index("raw") is not None else f"raw: {NOT_REPORTED}"
            shown = f"final, after {last}"
            if step is not None and step.reported_stage is not None:  # a server's one stage, by its name
                raw_words += f" · server reports {step.reported_stage} only"
                shown = p_label(step)
            choices = [
                f"p: {raw_words} · {shown} (colour)",
                "p: raw (grey) · final (colour)",
                "p: raw · final",
                "p",
            ]
        reported = step is None or self._effects_reported()
        dry = " · DRY" if self._dry_ran() else ""
        effect = [f"Δ logit: bias · penalty{dry} · ×count", f"Δ logit: bias · penalty{dry}", "Δ logit"]
        if not reported:
            effect = [f"Δ logit: {NOT_REPORTED} by the server", "Δ logit: not reported", "Δ logit"]
        for plot, texts in ((self.bars_plot, choices), (self.effect_plot, effect)):
            axis = plot.getAxis("bottom")
            text = fit_text(QFontMetrics(axis.label.font()), plot.vb.width(), texts)
            if axis.labelText != text:
                plot.setLabel("bottom", text)
            else:
                axis.resizeEvent()  # centred on the axis as it is now, not as it was when set
        self.plots.setToolTip(self._legend(last))

    def _legend(self, last: str) -> str:
        greedy = self.step is not None and self.step.params.greedy and not self.step.forced
        return (
            f"Grey: the model's own probability (raw). Colour: after {last}, the distribution the "
            "token was drawn from; the chosen token is outlined. ✕: removed by a stage.\n"
            "Right: the change of each logit made by logit_bias (green), the penalties (red)"
            + (" and DRY (purple, the middle bar)" if self._dry_ran() else "")
            + "; ×n: "
            + COUNT_NOTE.removeprefix("count: ")
            + ("\n" + DRY_NOTE if self._dry_ran() else "")
            + "\n"
            + TEMPERATURE_NOTE
            + ("\n" + GREEDY_NOTE if greedy else "")
        )
