"""GUI responsiveness while a reply generates: gaps of a 10 ms timer on the GUI thread.

    python -m bench.gui_stall [--model default] [--tokens 64]

Prints the largest and the 99th-percentile gap between timer ticks while the
real app (offscreen) generates at full speed, and the GUI thread's time per
received token.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def measure(model: str, tokens: int) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QElapsedTimer, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from app.window import MainWindow
    from engine.params import SamplingParams

    app = QApplication.instance() or QApplication([])
    scratch = Path(tempfile.mkdtemp(prefix="logitscope-bench-"))
    settings = QSettings(str(scratch / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(db_path=scratch / "db.sqlite3", settings=settings, model=model)
    window.show()
    while window.model_info is None and not window.last_error:
        app.processEvents()
        time.sleep(0.005)
    if window.last_error:
        raise SystemExit(window.last_error)
    window.controls.set_params(
        SamplingParams(max_tokens=tokens, logit_bias={t: -100.0 for t in window.model_info.eos_token_ids})
    )
    gaps: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.nsecsElapsed()]

    def tick() -> None:
        now = clock.nsecsElapsed()
        gaps.append((now - last[0]) / 1e6)
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    gui_time = [0.0]
    original = window._on_token

    def timed_on_token(tag, step):
        t0 = time.perf_counter()
        original(tag, step)
        gui_time[0] += time.perf_counter() - t0

    window.engine.worker.token_sampled.disconnect(window._on_token)
    window.engine.worker.token_sampled.connect(timed_on_token)
    redraw = window._redraw_if_dirty
    redraw_time = [0.0]

    def timed_redraw():
        t0 = time.perf_counter()
        redraw()
        redraw_time[0] += time.perf_counter() - t0

    window.redraw_timer.timeout.disconnect(window._redraw_if_dirty)
    window.redraw_timer.timeout.connect(timed_redraw)
    window.composer.setPlainText("Tell me a long story about a lighthouse.")
    window.send()
    timer.start()
    last[0] = clock.nsecsElapsed()
    started = time.perf_counter()
    while window.busy():
        app.processEvents()
        time.sleep(0.001)
    elapsed = time.perf_counter() - started
    timer.stop()
    steps = len(window.thread_messages[-1].branch.steps)
    window.close()
    gaps.sort()
    return {
        "model": window.model_info.name,
        "tokens": steps,
        "seconds": round(elapsed, 2),
        "timer_gap_max_ms": round(gaps[-1], 1),
        "timer_gap_p99_ms": round(gaps[int(0.99 * (len(gaps) - 1))], 1),
        "gui_ms_per_token": round(1000 * (gui_time[0] + redraw_time[0]) / max(steps, 1), 2),
        "redraws": window.redraws,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="default")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    print(json.dumps(measure(args.model, args.tokens)))
    sys.exit(0)


if __name__ == "__main__":
    main()
