"""Figure 19: a reply's decode rate with the new views open.

    python -m bench.views_open [--tokens 32] [--rounds 3]

The real window, worker thread and engine on the default model (nothing stands in): the
same greedy reply (``--tokens`` tokens, EOS blocked, ``top_logprobs=10`` as figure 1)
written in a new conversation each time, in rounds that interleave three states of the
window so that the machine's drift falls on all of them alike:

- ``plain``: the inspector on its Chain tab, no other window;
- ``layers``: the inspector's Layers tab in view (it follows the reply being written, so
  every throttled refresh asks the lens whether the token can be read and says why not);
- ``compare``: Models → Compare models… open on a finished comparison (the running model
  against itself in float16), the timeline's KLD row and the inspector's Models tab made.

The decode rate of a reply is (tokens − 1) / (time of its last token − time of its first),
both taken on the worker's thread when the token is emitted: prefill is left out, and the
GUI thread's cost shows only as far as it slows the engine (the GIL, the two cores). The
figure is each state's median rate over the plain one's (goal ≥ 0.97: the same tokens/s).

A fourth state, ``lens_beside``: the Layers tab's *every token* job over an earlier reply
started while the reply streams. A reply goes first (``app/shell/engine_thread/stepped_runner.py``): the
job's pieces wait until the reply has ended, so its ratio has the same goal;
``lens_positions_during`` counts the positions read while the reply was being written (0
by design) and ``lens_positions`` those read once the job has finished after it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.guard import LOAD_LIMIT_S, BenchError, one_line, wait_for
from engine.api.params import SamplingParams

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
STATES = ("plain", "layers", "compare")
GOAL = 0.97


JOB_LIMIT_S = 600.0
"""A reply, a comparison or a lens job on the default model: seconds each on this CPU."""


def _wait(window, condition, what: str, limit_s: float = JOB_LIMIT_S) -> None:
    """Until ``condition()``; a ``BenchError`` if the window shows an error or time runs out."""
    wait_for(window, condition, what, limit_s)


def _params(window, tokens: int) -> SamplingParams:
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    return SamplingParams(temperature=0.0, max_tokens=tokens, top_logprobs=10, logit_bias=no_eos)


class _Clock:
    """Times of the tokens the worker emits, taken on its own thread (a direct connection)."""

    def __init__(self, worker) -> None:
        self.times: list[float] = []
        worker.token_sampled.connect(lambda *_: self.times.append(time.perf_counter()))

    def rate(self, start: int) -> float:
        times = self.times[start:]
        return (len(times) - 1) / (times[-1] - times[0])


def _reply(app, window, clock: _Clock, tokens: int) -> float:
    """A new conversation and one reply in it: the reply's decode rate."""
    window.new_chat()
    window.controls.set_params(_params(window, tokens))
    window.composer.setPlainText(PROMPT)
    start = len(clock.times)
    window.send()
    _wait(window, lambda: not window.busy(), "a reply")
    return clock.rate(start)


def _set_state(app, window, state: str, dialog) -> None:
    from app.views.inspector import CHAIN_TAB, LAYERS_TAB

    window.inspector.tabs.setCurrentIndex(LAYERS_TAB if state == "layers" else CHAIN_TAB)
    if dialog is not None:
        dialog.setVisible(state == "compare")
    app.processEvents()


def _compare_dialog(app, window, clock: _Clock, tokens: int):
    """The Compare models dialog open on a finished comparison of a first reply."""
    _reply(app, window, clock, tokens)
    steps = window.entries[-1].steps
    window.model.select((window.entries[-1].stream, len(steps) - 1))
    action = window.analysis_actions.compare_models  # enabled by the selection (window.actions)
    action.trigger()
    dialog = window.compare_models.dialog
    dialog.precision.setCurrentIndex(dialog.precision.findData("float16"))
    dialog.compare_button.click()
    _wait(window, lambda: not dialog.running, "the comparison of the models")
    if window.compare_models.last is None:
        raise BenchError(f"the comparison did not finish: {one_line(window.last_error) or 'no error shown'}")
    return dialog


def _lens_beside(app, window, clock: _Clock, tokens: int) -> tuple[float, int, int]:
    """A reply written while the lens is asked to read every token of the previous one: its
    rate, the positions read before it ended and those read by the job's end."""
    from app.views.inspector import LAYERS_TAB

    previous = window.entries[-1]
    window.controls.set_params(_params(window, tokens))
    window.composer.setPlainText("And then?")
    start = len(clock.times)
    window.send()
    _wait(window, lambda: len(clock.times) > start, "the reply's first token")
    window.inspector.tabs.setCurrentIndex(LAYERS_TAB)
    window.model.select((previous.stream, 0))
    lens = window.logit_lens
    job = lens.read_every_token()
    if job is None:
        raise BenchError(f"the lens did not start: {lens.lens.every_unavailable()}")

    def read() -> int:
        found = lens.lens.of(previous.stream)
        return len(found.rows) if found is not None else 0

    _wait(window, lambda: not window.busy(), "a reply beside the lens job")
    during = read()
    _wait(window, lambda: lens.lens.running is None, "the lens job")
    return clock.rate(start), during, read()


def views_open(tokens: int = 32, rounds: int = 3, model: str = "default") -> dict:
    """``model``: what the window loads (``engine.models.load``'s words)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.shell.window import MainWindow

    app = QApplication.instance() or QApplication([])
    scratch = Path(tempfile.mkdtemp(prefix="logitscope-views-open-"))
    settings = QSettings(str(scratch / "s.ini"), QSettings.Format.IniFormat)
    window = MainWindow(db_path=scratch / "db.sqlite3", settings=settings, model=model)
    try:  # closed on every way out: a worker thread left running aborts the process at exit
        return _views_open(app, window, tokens, rounds)
    finally:
        window.close()


def _views_open(app, window, tokens: int, rounds: int) -> dict:
    window.resize(1500, 900)
    window.show()
    _wait(window, lambda: window.model_info is not None, "the model's load", LOAD_LIMIT_S)
    clock = _Clock(window.engine.worker)
    dialog = _compare_dialog(app, window, clock, tokens)
    _reply(app, window, clock, tokens)  # warm: the first reply of a conversation compiles
    rates: dict[str, list[float]] = {state: [] for state in STATES}
    for _ in range(rounds):
        for state in STATES:
            _set_state(app, window, state, dialog)
            rates[state].append(_reply(app, window, clock, tokens))
    _set_state(app, window, "plain", dialog)
    beside, during, positions = _lens_beside(app, window, clock, tokens)
    plain = statistics.median(rates["plain"])
    result = {"tokens": tokens, "rounds": rounds, "goal": GOAL}
    for state in STATES:
        result[f"{state}_tokens_per_s"] = [round(r, 3) for r in rates[state]]
    for state in STATES[1:]:
        ratio = statistics.median(rates[state]) / plain
        result[f"{state}_ratio"] = round(ratio, 3)
        result[f"{state}_met"] = ratio >= GOAL
    result["lens_beside_ratio"] = round(beside / plain, 3)
    result["lens_beside_met"] = beside / plain >= GOAL
    result["lens_positions_during"] = during
    result["lens_positions"] = positions
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        print(json.dumps(views_open(args.tokens, args.rounds), indent=1))
    except BenchError as exc:
        raise SystemExit(f"python -m bench.views_open: {exc}") from None


if __name__ == "__main__":
    main()
