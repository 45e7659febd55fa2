"""Figure 15: start-up. Seconds from launching ``python -m app`` to a window that answers
input, and to the model ready, on the first run (the bundled GGUF converted into an empty
cache) and on later runs (the cache filled), each in a fresh profile (home, settings,
database). The peer: a fresh ``python`` that imports mlx-lm and ``mlx_lm.load``s the same
converted folder, the least a later run of any mlx-lm front end does before it can answer.

The app writes its own marks (``app/shell/startup/startup_report.py``); on a machine with no display the
app runs offscreen, which leaves out the window server's share of showing the window.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.guard import BenchError, one_line

MARKS = ("python_ready", "qt_imported", "window_built", "window_shown", "answers_input", "model_ready")
PEER = """
import time, sys
t0 = float(sys.argv[2])
import mlx_lm
imported = time.time() - t0
model, tokenizer = mlx_lm.load(sys.argv[1])
import mlx.core as mx
mx.eval(model.parameters())
print(imported, time.time() - t0)
"""


def _env(root: Path, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_STATE_HOME=str(home / ".local/state"),
        XDG_CACHE_HOME=str(home / ".cache"),
        LOGITSCOPE_CACHE_DIR=str(cache),
    )
    if sys.platform.startswith("linux") and not env.get("DISPLAY"):
        env["QT_QPA_PLATFORM"] = "offscreen"
    return env


def launch_app(root: Path, cache: Path, timeout: float = 900, model: str = "default") -> dict:
    report = root / "startup.json"
    env = _env(root, cache)
    env["LOGITSCOPE_LAUNCHED_AT"] = repr(time.time())
    try:
        run = subprocess.run(
            [sys.executable, "-m", "app", "--model", model, "--startup-report", str(report)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"the app did not report its start-up within {timeout:.0f} s") from exc
    if not report.exists():
        last = one_line(run.stderr.strip().splitlines()[-1]) if run.stderr.strip() else "nothing on stderr"
        raise BenchError(f"the app wrote no start-up report (exit {run.returncode}): {last}")
    data = json.loads(report.read_text())
    if "error" in data:
        raise BenchError(f"the model failed to load: {one_line(str(data['error']))}")
    return data


def launch_peer(folder: Path) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", PEER, str(folder), repr(time.time())], capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        raise BenchError(f"mlx_lm.load of {folder} failed: {one_line(out.stderr.strip().splitlines()[-1])}")
    imported, ready = (float(v) for v in out.stdout.split())
    return imported, ready


def converted_folder(cache: Path) -> Path:
    found = sorted(p.parent for p in cache.rglob("config.json"))
    if not found:
        raise BenchError(f"no converted model under {cache}")
    return found[0]


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 2)


def startup(later_runs: int = 3, model: str = "default") -> dict:
    """``model``: what the app loads (``--model``); a folder is also what the peer loads, and
    a first run has nothing to convert."""
    scratch = Path(tempfile.mkdtemp(prefix="logitscope-bench-startup-"))
    cache = scratch / "cache"
    first = launch_app(scratch / "run0", cache, model=model)
    later = [launch_app(scratch / f"run{i + 1}", cache, model=model) for i in range(max(1, later_runs))]
    folder = Path(model) if Path(model).is_dir() else converted_folder(cache)
    peer = [launch_peer(folder) for _ in range(max(1, later_runs))]
    peer_ready = round(statistics.median(r for _, r in peer), 2)
    ours_ready = _median(later, "model_ready")
    return {
        "first_run": {k: first.get(k) for k in (*MARKS, "max_gap_ms_while_loading")},
        "first_run_stages_s": _stage_spans(first["stages"], first["model_ready"]),
        "later_runs": {k: _median(later, k) for k in (*MARKS, "max_gap_ms_while_loading")},
        "later_run_stages_s": _stage_spans(later[0]["stages"], later[0]["model_ready"]),
        "mlx_lm_import_s": round(statistics.median(i for i, _ in peer), 2),
        "mlx_lm_load_ready_s": peer_ready,
        "ratio_ready_later": round(ours_ready / peer_ready, 3) if peer_ready else None,
        "runs": {"first": first, "later": later, "peer": peer},
    }


def _stage_spans(stages: list, ready: float) -> dict[str, float]:
    """Seconds in each loader stage: from its first report to the next stage's first (the
    last one, to the model ready)."""
    starts: list[tuple[str, float]] = []
    for name, _fraction, t in stages:
        if not starts or starts[-1][0] != name:
            starts.append((name, t))
    ends = [t for _, t in starts[1:]] + [ready]
    spans: dict[str, float] = {}
    for (name, t), end in zip(starts, ends, strict=True):
        spans[name] = round(spans.get(name, 0.0) + end - t, 2)
    return spans
