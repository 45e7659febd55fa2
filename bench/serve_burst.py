"""The app as a server under a burst: its GUI thread while 200 requests arrive at once.

    python -m bench.serve_burst [--requests 200] [--tokens 4] [--keep 50]

The real window loads the tests' tiny llama (``tests/support/tiny_model.py``: the figure is
the GUI's work for each request, not the model's), starts serving on 127.0.0.1 with its
limits raised past the burst (every request is held, none refused with a 429), keeps the
newest ``keep`` served requests, and ``requests`` clients, each a thread with ``httpx``,
post a ``/v1/completions`` of ``tokens`` tokens at the same moment. From the first request
sent until the last one's end is in the Served list and its writes are done:

- ``max_gap_ms``: the largest gap between ticks of a 10 ms timer on the GUI thread (the
  window's responsiveness; the goal is 50 ms), ``p99_gap_ms``;
- ``max_gap_cpu_ms``: the most CPU time the GUI thread spent between two ticks (what the
  app itself stalls, which a busy machine cannot inflate);
- ``idle_max_gap_ms``: the same timer with nothing served, just before;
- ``served_rows``: the ``served`` rows left in the file afterwards (the retention: ``keep``);
- ``seconds``: the burst's wall time.

The same burst runs twice: with the requests written on their writer's thread (the app as
it is) and ``inline_*``: written over the GUI thread's connection (as the app once did).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.guard import BenchError, wait_for
from bench.gui_scaling import GapTimer, timer_gaps

LOAD_LIMIT_S = 120.0
CLIENTS = """
import json, sys, threading
import httpx

url, count, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
statuses = [0] * count
sys.stdin.readline()  # go


def one(i):
    body = {"prompt": f"request {i}", "max_tokens": tokens, "temperature": 0}
    try:
        statuses[i] = httpx.post(f"{url}/completions", json=body, timeout=300).status_code
    except httpx.HTTPError:
        statuses[i] = -1


threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(statuses))
"""


def serve_burst(folder: str | Path, requests: int = 200, tokens: int = 4, keep: int = 50, idle_s: float = 1.0) -> dict:
    """The burst against the window serving the model in ``folder``, off and on the GUI thread."""
    threaded = measure(folder, requests, tokens, keep, idle_s, off_gui=True)
    inline = measure(folder, requests, tokens, keep, idle_s, off_gui=False)
    return {**threaded, **{f"inline_{k}": v for k, v in inline.items() if k != "requests"}}


def measure(folder: str | Path, requests: int, tokens: int, keep: int, idle_s: float, off_gui: bool) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.shell.window import MainWindow

    app = QApplication.instance() or QApplication([])
    scratch = Path(tempfile.mkdtemp(prefix="logitscope-serve-burst-"))
    settings = QSettings(str(scratch / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(db_path=scratch / "db.sqlite3", settings=settings, model=str(folder))
    try:  # closed on every way out: a worker thread left running aborts the process at exit
        return _measure(app, window, scratch / "db.sqlite3", requests, tokens, keep, idle_s, off_gui)
    finally:
        window.close()


def _measure(app, window, db: Path, requests: int, tokens: int, keep: int, idle_s: float, off_gui: bool) -> dict:

    from app.model.served_writer import InlineWriter
    from app.views.serve_dialog import ServeChoice
    from engine.serve.limits import ServeLimits

    window.resize(1500, 900)
    window.show()
    wait_for(window, lambda: window.model_info is not None, "the tiny model's load", LOAD_LIMIT_S)
    served = window.model.served
    if not off_gui:
        served.use_writer(InlineWriter(window.store))
    window.serving.cleanup.set_keep(keep)
    window.serving.limits = ServeLimits(max_queued=requests + 8, max_connections=requests + 8)
    if not window.serving.start(ServeChoice("127.0.0.1", 0, None)):
        raise BenchError("the app could not start serving")
    url = window.serving.server.url
    baseline = timer_gaps(app, idle_s)

    # The clients are a process of their own: their threads must not take the GUI's interpreter lock.
    clients = subprocess.Popen(
        [sys.executable, "-c", CLIENTS, url, str(requests), str(tokens)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    statuses: list[int] = []
    gaps = GapTimer()
    wall = time.perf_counter()
    reader = threading.Thread(target=lambda: statuses.extend(json.loads(clients.communicate("go\n")[0] or "[]")))
    reader.start()
    flushed: list[bool] = []

    def ended() -> bool:
        if reader.is_alive() or served.live or served.count < requests:
            return False
        if not flushed:  # a no-op behind the writer's last work: its result comes after theirs
            flushed.append(False)
            served.writer.submit(lambda _store: None, lambda _result: flushed.append(True))
        return flushed[-1]

    wait_for(window, ended, f"the burst of {requests} requests", 120 + requests)
    wall = time.perf_counter() - wall
    gaps.stop()
    window.serving.stop()
    if statuses.count(200) != requests:
        raise BenchError(f"of {requests} requests, {requests - statuses.count(200)} were not answered with 200")
    with sqlite3.connect(str(db)) as con:
        rows = con.execute("SELECT COUNT(*) FROM served").fetchone()[0]
    con.close()
    return {
        "requests": requests,
        **gaps.figures(),
        "idle_max_gap_ms": round(max(baseline), 1),
        "served_rows": rows,
        "seconds": round(wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--keep", type=int, default=50)
    args = parser.parse_args()
    from bench.common import tiny_model

    folder = Path(tempfile.mkdtemp(prefix="logitscope-serve-burst-model-")) / "tiny"
    tiny_model(folder)
    print(json.dumps(serve_burst(folder, args.requests, args.tokens, args.keep), indent=2))


if __name__ == "__main__":
    main()
