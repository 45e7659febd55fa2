"""PNG plots of a benchmark run (pyqtgraph, offscreen)."""

from __future__ import annotations

import os
from pathlib import Path


def _app():
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication([])


def _export(widget, path: Path) -> None:
    import pyqtgraph.exporters

    widget.resize(720, 420)
    exporter = pyqtgraph.exporters.ImageExporter(widget.plotItem)
    exporter.parameters()["width"] = 1440
    exporter.export(str(path))


def _plot_widget(title: str):
    _app()
    import pyqtgraph as pg

    pg.setConfigOptions(background="w", foreground="k", antialias=True)
    widget = pg.PlotWidget(title=title)
    widget.addLegend(offset=(10, 10))
    return widget


def batched_plot(figures: dict, path: Path) -> None:
    import pyqtgraph as pg

    rows = figures["batched"]["by_batch"]
    sizes = [int(s) for s in rows]
    widget = _plot_widget("Batched decode: aggregate tokens/s (each row its own sampler + penalties)")
    x = list(range(len(sizes)))
    ours = [rows[str(s)]["ours_tps"] for s in sizes]
    peer = [rows[str(s)]["mlx_lm_tps"] for s in sizes]
    widget.addItem(pg.BarGraphItem(x=[i - 0.2 for i in x], height=ours, width=0.38, brush="#1a73e8", name="Logitscope"))
    widget.addItem(
        pg.BarGraphItem(x=[i + 0.2 for i in x], height=peer, width=0.38, brush="#9aa0a6", name="mlx-lm BatchGenerator")
    )
    widget.getAxis("bottom").setTicks([[(i, f"batch {s}") for i, s in zip(x, sizes, strict=True)]])
    widget.setLabel("left", "tokens/s")
    _export(widget, path)


def penalty_plot(figures: dict, path: Path) -> None:
    import pyqtgraph as pg

    rows = figures["penalty_cost"]["by_history"]
    history = [int(h) for h in rows]
    widget = _plot_widget("Decode step with all three penalties, over the step without (window = all)")
    widget.plot(
        history,
        [rows[str(h)]["ratio"] for h in history],
        pen=pg.mkPen("#1a73e8", width=2),
        symbol="o",
        symbolBrush="#1a73e8",
        name="Logitscope (incremental counts)",
    )
    peer = [
        (rows[str(h)]["step_ms_none"] + rows[str(h)]["mlx_lm_processors_ms"]) / rows[str(h)]["step_ms_none"]
        for h in history
    ]
    widget.plot(
        history,
        peer,
        pen=pg.mkPen("#9aa0a6", width=2),
        symbol="s",
        symbolBrush="#9aa0a6",
        name="mlx-lm processors (rescan the window)",
    )
    widget.setLabel("bottom", "history (tokens of prompt + output)")
    widget.setLabel("left", "step time ratio")
    widget.setYRange(0.9, max(1.3, max(peer) * 1.05))
    _export(widget, path)
