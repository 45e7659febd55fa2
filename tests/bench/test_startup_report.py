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
    env["LOGITSCOPE_LAUNCHED_AT"] = repr(time.time())
    run = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(tiny_folder), "--startup-report", str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=os.getcwd(),
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(report.read_text())
    times = [data[k] for k in MARKS]
    assert times == sorted(times) and 0 < times[0] < 5, data
    assert data["stages"] and data["stages"][-1][0] == "ready" and data["stages"][-1][2] <= data["model_ready"]
    assert data["max_gap_ms_while_loading"] >= 0
    spans = _stage_spans(data["stages"], data["model_ready"])
    # Each span is rounded to 0.01 s in the report: allow that much per span.
    assert sum(spans.values()) <= data["model_ready"] - data["stages"][0][2] + 0.005 * len(spans) + 1e-3
    assert list(spans)[-1] == "ready"
