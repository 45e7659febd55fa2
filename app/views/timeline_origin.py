"""What the timeline says about the reply it shows: the backend, model and precision that
wrote it (``app.model.reply_origin``), whatever model is loaded now (issue 24)."""

from __future__ import annotations

import pyqtgraph as pg

from app.model.reply_origin import ReplyOrigin
from app.views.elided_label import ElidedLabel


class OriginLabels:
    """Beside the stage selector, the reply's origin (``tiny-llama · float32 · local``); for a
    server's reply, the probability plot titled with the stage its numbers are and the
    entropy plot with *entropy: not reported by the server*. A local reply's plots have no
    title."""

    def __init__(self, prob_plot: pg.PlotItem, entropy_plot: pg.PlotItem) -> None:
        self.label = ElidedLabel()
        self.prob_plot, self.entropy_plot = prob_plot, entropy_plot
        self.origin: ReplyOrigin | None = None

    def show(self, origin: ReplyOrigin) -> None:
        """Label the plots by ``origin``; a title costs a relayout, so only on a change."""
        if origin == self.origin:
            return
        self.origin = origin
        self.label.setText(origin.label() if origin.model or origin.remote else "")
        self.label.setToolTip(f"This reply was written by {origin.label()}." if origin.model else "")
        self.prob_plot.setTitle(origin.stage_words() or None)
        self.entropy_plot.setTitle(origin.entropy_title())
