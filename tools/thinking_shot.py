"""``python -m tools.thinking_shot --model FOLDER --out PATH``: the README's screenshot of a
reasoning model's reply.

Runs the app offscreen in a throwaway profile with a reasoning model (``--model``; the
README's is the tiny Qwen3-style model ``python -m tests.support.tiny_thinking FOLDER`` writes,
whose random weights never close their thinking: the budget does), sets the thinking's
settings, *Different settings for the answer* and a *Thinking budget* in the Sampling dock,
sends ``--prompt``, selects the first answer token and saves the window: the thinking
collapsed above the answer, the timeline's thinking span, "answer" line and the answer's
first tokens drawn larger, the inspector naming the phase.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.thinking_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--model", required=True, help="a reasoning model (a folder)")
    p.add_argument("--prompt", default="What is 17 × 23?")
    p.add_argument("--budget", type=int, default=16, help="the thinking budget (tokens)")
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--open", action="store_true", help="open the thinking (default: collapsed)")
    p.add_argument("--size", default="1000x700")
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from engine.api.params import SamplingParams
    from tools.shot_window import scratch_window, show_at, waiter

    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = scratch_window(args.model, "logitscope-thinking-")
    show_at(window, args.size)
    wait = waiter(app, args.timeout)
    if not wait(lambda: window.model_info is not None) or window.model_info.reasoning is None:
        print("error: the model did not load, or has no reasoning markers", file=sys.stderr)
        return 1
    info = window.model_info
    markers = info.reasoning
    # The end of text and the markers banned: the thinking runs to the budget, the answer to the end.
    banned = {t: -100.0 for t in (*info.eos_token_ids, *markers.start, *markers.end)}
    thinking = SamplingParams(temperature=1.0, top_p=0.95, seed=7, max_tokens=args.max_tokens, top_logprobs=5)
    window.controls.set_params(thinking.with_changes(logit_bias=banned, thinking_budget=args.budget))
    panel = window.panel
    panel.reasoning.answer_switch.setChecked(True)
    panel.answer_controls.set_params(thinking.with_changes(temperature=0.6, top_k=20, seed=None, logit_bias=banned))
    window.composer.setPlainText(args.prompt)
    window.send()
    if not wait(lambda: window.busy()) or not wait(lambda: not window.busy()):
        print("error: the reply did not finish in time", file=sys.stderr)
        return 1
    window._redraw_if_dirty()
    entry = [e for e in window.entries if e.role == "assistant"][-1]
    if args.open:
        body = next(b for b in window.chat.writer.bodies.values() if b.thinking is not None)
        window.chat.writer.toggle_thinking(body.id)
    first = window.timeline.phase.end
    window.model.select((entry.stream, first if first is not None else 0))
    window._redraw_if_dirty()
    for _ in range(20):
        app.processEvents()
    window.grab().save(args.out)
    print(args.out)
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
