"""``python -m app --startup-report`` (bench figure 15): a real app process in a fresh profile
writes its start-up marks in order, from the launcher's clock, and quits by itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench.startup import MARKS, _env, _stage_spans


def test_the_app_reports_its_start_up_and_quits(tiny_folder, tmp_path):
    report = tmp_path / "startup.json"
    env = _env(tmp_path, tmp_path / "cache")
    env["QT_QPA_PLATFORM"] = "offscreen"
    launched = time.time()
    env["LOGITSCOPE_LAUNCHED_AT"] = repr(launched)
    run = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(tiny_folder), "--startup-report", str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: the start-up takes seconds
        cwd=os.getcwd(),
    )
    took = time.time() - launched
    assert run.returncode == 0, run.stderr
    data = json.loads(report.read_text())
    times = [data[k] for k in MARKS]
    # From the launcher's clock: every mark after the launch and before the process ended
    # (an epoch time, or one from another start, would not lie in that span); no speed asked.
    assert times == sorted(times) and times[0] > 0 and times[-1] <= took + 1e-3, (data, took)
    assert data["stages"] and data["stages"][-1][0] == "ready" and data["stages"][-1][2] <= data["model_ready"]
    # The GUI thread's longest gap was measured (the ticker ran) within the span it covers,
    # from answers_input to model_ready (each mark rounded to 1 ms).
    span_ms = (data["model_ready"] - data["answers_input"]) * 1000
    assert 0 < data["max_gap_ms_while_loading"] <= span_ms + 2, data
    spans = _stage_spans(data["stages"], data["model_ready"])
    # Each span is rounded to 0.01 s in the report: allow that much per span.
    assert sum(spans.values()) <= data["model_ready"] - data["stages"][0][2] + 0.005 * len(spans) + 1e-3
    assert list(spans)[-1] == "ready"
