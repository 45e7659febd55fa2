"""GUI cost per token against the length of the conversation, with no model.

    python -m bench.gui_scaling [--lengths 100,2000,20000] [--tokens 400] [--rate 200]

For each length, a conversation of that many tokens (replies of up to 500 tokens, every
token with ten candidates through a four-stage chain, as the engine reports them) is
saved, the real window opens it, and a reply of ``--tokens`` synthetic TokenSteps
streams in at ``--rate`` tokens/s through the real worker thread, signals, model and
views (a stand-in session replaces the engine; nothing else is faked). Measured from
Send until the reply is saved (its steps serialized on the background thread and written):

- ``ms_per_token``: CPU time of the GUI thread (``time.thread_time``) per token;
- ``max_gap_ms``: the largest gap between ticks of a 10 ms timer on the GUI thread;
- ``max_gap_cpu_ms``: the most CPU time the GUI thread spent between two ticks: the
  largest stall the app itself causes, which a busy machine's scheduler cannot inflate;
- ``p99_gap_ms``, ``open_ms`` (opening the conversation, once), ``tokens_drawn``
  (tokens the chat inserted while streaming: the reply's only, the rest is not redrawn);
- ``idle_max_gap_ms``: the same timer for 1.5 s with nothing streaming, just before: on a
  busy machine the scheduler alone makes gaps, and this says how large.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.guard import BenchError, drifted, wait_for
from engine.api.backend import Messages, ModelInfo, StartedRequest
from engine.api.events import Candidate, Event, Finished, TokenStep
from engine.api.kv_quantization import KV_OFF, KVQuantization
from engine.api.params import SamplingParams
from engine.models.load import ProgressFn
from engine.session.session import EngineSession

WORDS = " the a lighthouse keeper found message in bottle, and sea was calm. night".split(" ")
CHAIN = ("raw", "penalties", "temperature", "top_p")
PARAMS = SamplingParams(temperature=0.7, top_p=0.9, repetition_penalty=1.1, top_logprobs=10, max_tokens=100_000)
REPLY_TOKENS = 500


def synthetic_step(index: int, request_id: int = 0) -> TokenStep:
    """A TokenStep shaped like the engine's: ten candidates through a four-stage chain."""
    chosen = index % 10
    top = []
    for k in range(10):
        raw = -0.4 - 0.35 * k - 0.05 * ((index + k) % 7)
        logprobs = (raw, raw - 0.02, raw * 1.3, raw * 1.3 + 0.1 if k < 6 else float("-inf"))
        word = WORDS[(index + k) % len(WORDS)]
        top.append(Candidate(k + 100, " " + word, 5.0 + raw, logprobs, "top_p" if k >= 6 else None, 0.0, -0.02, 1))
    text = "\n" if index % 97 == 96 else " " + WORDS[(index + chosen) % len(WORDS)]
    return TokenStep(
        request_id=request_id,
        index=index,
        position=40 + index,
        token_id=chosen + 100,
        text=text,
        piece=text,
        chain=CHAIN,
        logprobs=top[min(chosen, 5)].logprobs,
        entropies=(2.1, 2.0, 1.6, 1.2),
        survivors=(49152, 49152, 49152, 6),
        top=tuple(top),
        params=PARAMS,
    )


def build_conversation(db_path: Path, tokens: int) -> int:
    """A conversation of ``tokens`` generated tokens, in replies of up to REPLY_TOKENS."""
    from app.store.store import Store

    store = Store(db_path)
    conversation = store.writes.new_conversation("You are a helpful assistant.", f"{tokens} tokens")
    after = None
    done = 0
    while done < tokens:
        n = min(REPLY_TOKENS, tokens - done)
        user = store.writes.add_user_message(conversation.id, f"Tell me more ({done}).", after)
        reply = store.writes.add_assistant_message(conversation.id, user.id)
        steps = [synthetic_step(i) for i in range(n)]
        after = store.writes.add_branch(
            reply.id, steps, "".join(s.text for s in steps), "length", "synthetic", PARAMS
        ).id
        done += n
    store.close()
    return conversation.id


class SyntheticSession(EngineSession):
    """Stands in for ``EngineSession`` on the worker's thread: no model, a paced stream.

    It derives from the real session, so a call the worker starts making is there (with
    the real one's words if it needs a model: "no model is loaded yet"), and
    ``tests/bench/test_bench_smoke.py`` checks that every call it overrides keeps the real
    signature (``bench.guard.drifted``): ``load`` once fell behind the precision and KV-cache
    arguments, the worker reported the load as failed and this bench waited for a model."""

    def __init__(self, tokens: int = 400, rate: float = 200.0) -> None:
        super().__init__()
        self.tokens, self.rate = tokens, rate
        self.stream = [synthetic_step(i, 1) for i in range(tokens)]
        self.request: int | None = None
        self.sent = 0
        self.started = 0.0

    def load(
        self, source: str, progress: ProgressFn | None = None, precision: str = "auto", kv: KVQuantization | None = None
    ) -> ModelInfo:
        self.info = ModelInfo(
            name="synthetic",
            source=source,
            vocab_size=49152,
            context_length=100_000,
            has_chat_template=True,
            eos_token_ids=(2,),
            path=source,
            precision="float16",
            precision_choice=precision,
            kv=kv or KV_OFF,
        )
        return self.info

    def start(self, messages: Messages, params: SamplingParams) -> StartedRequest:
        self.request, self.sent, self.started = 1, 0, time.perf_counter()
        return StartedRequest(1, tuple(range(40)))

    def has_work(self) -> bool:
        return self.request is not None

    def step(self) -> list[Event]:
        due = min(self.tokens, int((time.perf_counter() - self.started) * self.rate) + 1)
        if due <= self.sent:
            time.sleep(max(0.0, self.sent / self.rate - (time.perf_counter() - self.started)))  # this thread only
            return []
        events: list[Event] = list(self.stream[self.sent : due])
        self.sent = due
        if self.sent == self.tokens:
            text = "".join(s.text for s in self.stream)
            events.append(Finished(1, "length", 40, self.tokens, 0, 1000.0, self.rate, text))
            self.request = None
        return events

    def cancel(self, request_id: int) -> None:
        self.request = None

    def cancel_all(self) -> None:
        self.request = None

    def update_params(self, request_id: int, params: SamplingParams) -> None:
        pass

    @staticmethod
    def memory_bytes() -> int:
        return 0

    @staticmethod
    def release_thread() -> None:
        pass  # no MLX stream was used on the worker's thread


STANDIN_LOAD_LIMIT_S = 120.0
"""The stand-in's load: nothing but the engine's imports on the worker's thread (seconds)."""


def measure(length: int, tokens: int = 400, rate: float = 200.0, idle_s: float = 1.5) -> dict:
    """One conversation of ``length`` tokens, then a reply of ``tokens`` at ``rate``; the
    window settles for ``idle_s`` (at most 1 s) and is watched idle for ``idle_s`` first."""
    if problems := drifted(SyntheticSession, EngineSession):
        raise BenchError("the stand-in session no longer matches EngineSession: " + "; ".join(problems))
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.shell.window import MainWindow

    app = QApplication.instance() or QApplication([])
    scratch = Path(tempfile.mkdtemp(prefix="logitscope-gui-scaling-"))
    conversation = build_conversation(scratch / "db.sqlite3", length)
    settings = QSettings(str(scratch / "s.ini"), QSettings.Format.IniFormat)
    settings.setValue("conversation", conversation)
    window = MainWindow(
        db_path=scratch / "db.sqlite3",
        settings=settings,
        model="synthetic",
        session_factory=lambda: SyntheticSession(tokens, rate),
    )
    try:  # closed on every way out: a worker thread left running aborts the process at exit
        return _measure(app, window, conversation, tokens, rate, idle_s)
    finally:
        window.close()


def _measure(app, window, conversation: int, tokens: int, rate: float, idle_s: float) -> dict:

    from app.__main__ import settle_memory

    window.resize(1500, 900)
    window.show()
    window.controls.set_params(PARAMS)
    # The stand-in session imports the engine on its thread.
    wait_for(window, lambda: window.model_info is not None, "the stand-in model's load", STANDIN_LOAD_LIMIT_S)
    app.processEvents()
    # Opening the conversation again, timed: reading it from the store and drawing it.
    started = time.perf_counter()
    window.open_conversation(conversation)
    app.processEvents()
    open_ms = (time.perf_counter() - started) * 1000
    settle(app, min(1.0, idle_s))  # the first paint of every view is not part of streaming
    settle_memory()  # as ``python -m app`` does once its window is up
    drawn_before = window.chat.writer.tokens_drawn
    baseline = timer_gaps(app, idle_s)

    gaps = GapTimer()
    cpu = time.thread_time()
    wall = time.perf_counter()
    window.composer.setPlainText("And then?")
    window.send()
    # Until the reply is saved: its steps are serialized on another thread after it ends.
    wait_for(
        window,
        lambda: not (window.busy() or window.background.pending),
        f"the {tokens}-token reply",
        60 + 10 * tokens / rate,
    )
    window._redraw_if_dirty()
    cpu = time.thread_time() - cpu
    wall = time.perf_counter() - wall
    gaps.stop()
    saved = len(window.thread_messages[-1].branch.steps)
    if saved != tokens:
        raise BenchError(f"the reply was saved with {saved} of its {tokens} tokens")
    return {
        "ms_per_token": round(1000 * cpu / tokens, 3),
        **gaps.figures(),
        "idle_max_gap_ms": round(max(baseline), 1),
        "open_ms": round(open_ms),
        "tokens_drawn": window.chat.writer.tokens_drawn - drawn_before,
        "tokens": saved,
        "seconds": round(wall, 2),
        "chat_redraws": window.redraws,
    }


def settle(app, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.01)


class GapTimer:
    """A 10 ms timer on the GUI thread from now until :meth:`stop`: each gap between two
    ticks (wall, ms) and the GUI thread's own CPU time in it (ms)."""

    def __init__(self) -> None:
        from PySide6.QtCore import QElapsedTimer, QTimer

        self.gaps: list[float] = []
        self.cpu_gaps: list[float] = []
        self._clock = QElapsedTimer()
        self._timer = QTimer()
        self._timer.setInterval(10)
        self._timer.timeout.connect(self._tick)
        self._clock.start()
        self._last = (0, time.thread_time())
        self._timer.start()

    def _tick(self) -> None:
        now, cpu_now = self._clock.nsecsElapsed(), time.thread_time()
        self.gaps.append((now - self._last[0]) / 1e6)
        self.cpu_gaps.append((cpu_now - self._last[1]) * 1000)
        self._last = (now, cpu_now)

    def stop(self) -> None:
        self._timer.stop()

    def figures(self) -> dict[str, float]:
        """The largest gap, the 99th percentile and the most GUI CPU between two ticks."""
        gaps = self.gaps
        return {
            "max_gap_ms": round(max(gaps), 1),
            "p99_gap_ms": round(sorted(gaps)[int(0.99 * (len(gaps) - 1))], 1),
            "max_gap_cpu_ms": round(max(self.cpu_gaps), 1),
        }


def timer_gaps(app, seconds: float) -> list[float]:
    """Gaps of a 10 ms timer on an idle GUI thread: what the machine alone does to it."""
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

    gaps: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [0]

    def tick() -> None:
        now = clock.nsecsElapsed()
        gaps.append((now - last[0]) / 1e6)
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    timer.start()
    loop.exec()
    timer.stop()
    return gaps[1:] or [0.0]


def gui_scaling(
    lengths: tuple[int, ...] = (100, 2000, 20000),
    tokens: int = 400,
    rate: float = 200.0,
    warmup: int = 100,
    idle_s: float = 1.5,
) -> dict:
    measure(100, warmup, rate, idle_s)  # warm up: first-use costs (fonts, symbol pixmaps, imports) are not per token
    return {str(n): measure(n, tokens, rate, idle_s) for n in lengths}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="100,2000,20000")
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--rate", type=float, default=200.0)
    args = parser.parse_args()
    lengths = tuple(int(n) for n in args.lengths.split(","))
    try:
        print(json.dumps(gui_scaling(lengths, args.tokens, args.rate)))
    except BenchError as exc:
        raise SystemExit(f"python -m bench.gui_scaling: {exc}") from None  # one line on stderr, exit 1
    sys.exit(0)


if __name__ == "__main__":
    main()
