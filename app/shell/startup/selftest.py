"""``--selftest``: the whole app path (Qt, the worker thread, the engine, the bundled model)
in one run, reported as one JSON line. The packaged app's CI test runs it."""

from __future__ import annotations

import json
import sys
import time

from PySide6.QtCore import QObject, Signal

from engine.api.params import SamplingParams

PROMPT = "What is the capital of France?"


class _Requests(QObject):
    load = Signal(str)
    submit = Signal(object)


def run_selftest(app, model: str, timeout: float, tokens: int = 8) -> int:
    from app.shell.engine_thread.worker import ChatJob, WorkerThread, describe, runtime_report

    engine = WorkerThread()
    requests = _Requests()
    requests.load.connect(engine.worker.load_model)
    requests.submit.connect(engine.worker.submit)
    state: dict = {"steps": []}
    engine.worker.model_loaded.connect(lambda info: state.__setitem__("info", info))
    engine.worker.model_failed.connect(lambda source, exc: state.__setitem__("error", describe(exc)))
    engine.worker.job_rejected.connect(lambda tag, exc: state.__setitem__("error", describe(exc)))
    engine.worker.token_sampled.connect(lambda tag, step: state["steps"].append(step))
    engine.worker.job_finished.connect(lambda tag, finished: state.__setitem__("finished", finished))
    deadline = time.monotonic() + timeout

    def wait_for(key: str) -> bool:
        while key not in state and "error" not in state:
            if time.monotonic() > deadline:
                state["error"] = f"timed out waiting for {key}"
            app.processEvents()
            time.sleep(0.005)
        return "error" not in state

    started = time.perf_counter()
    requests.load.emit(model)
    ok = wait_for("info")
    load_seconds = time.perf_counter() - started
    if ok:
        messages = ({"role": "user", "content": PROMPT},)
        requests.submit.emit(ChatJob(1, messages, SamplingParams(max_tokens=tokens, top_logprobs=5)))
        ok = wait_for("finished")
    engine.stop()
    if not ok:
        print(json.dumps({"ok": False, "error": state["error"]}))
        return 1
    info, finished = state["info"], state["finished"]
    report = {
        "ok": True,
        "model": info.name,
        "model_file": info.path,
        "prompt": PROMPT,
        "tokens": [s.token_id for s in state["steps"]],
        "text": finished.text,
        "tokens_per_s": finished.generation_tps,
        "load_seconds": round(load_seconds, 2),
        **help_report(),
        **runtime_report(),
    }
    print(json.dumps(report))
    sys.stdout.flush()
    return 0


def help_report() -> dict:
    """Where Help → Logitscope Help reads from, and whether its pages and screenshots are there."""
    from app.views.help_window import HELP_START, help_root

    root = help_root()
    return {
        "help": str(root / HELP_START),
        "help_pages": sorted(p.name for p in (root / "docs").glob("*.md")),
        "help_screenshots": len(list((root / "docs" / "screenshots").glob("*.png"))),
    }
