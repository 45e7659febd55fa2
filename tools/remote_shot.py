"""``python -m tools.remote_shot --server URL OUT.png``: the README's remote screenshot.

Opens the window in a throwaway profile, connects to ``URL`` through the connect dialog
(its first model, or ``--model``), sends one short question, selects a token and saves
the window (1500×900 by default): the status bar and the inspector show which
distribution the server reports.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.remote_shot")
    parser.add_argument("out")
    parser.add_argument("--server", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--local-model", default="default", help="loaded first, as at a normal start")
    parser.add_argument("--prompt", default="What is the capital of France? One sentence.")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--select-token", type=int, default=3)
    parser.add_argument("--size", default="1500x900")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from engine.api.params import SamplingParams
    from tools.shot_window import scratch_window, show_at, waiter

    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = scratch_window(args.local_model, "logitscope-remote-shot-")
    show_at(window, args.size)
    wait = waiter(app, args.timeout)

    if not wait(lambda: window.model_info is not None or window.last_error):
        print("error: the local model did not load", file=sys.stderr)
        return 1
    dialog = window.open_connect_dialog()
    dialog.url.setText(args.server)
    dialog.probe()
    wait(lambda: not dialog.probing)
    if dialog.error.text():
        print(f"error: {dialog.error.text()}", file=sys.stderr)
        return 1
    if args.model:
        dialog.model.setCurrentText(args.model)
    dialog.accept()
    served = lambda: window.model_info is not None and window.model_info.capabilities.network  # noqa: E731
    if not wait(lambda: served() or window.last_error):
        print("error: not connected in time", file=sys.stderr)
        return 1
    if window.last_error:
        print(f"error: {window.last_error}", file=sys.stderr)
        return 1
    window.controls.set_params(SamplingParams(max_tokens=args.max_tokens, top_logprobs=8))
    window.composer.setPlainText(args.prompt)
    window.send()
    wait(lambda: not window.busy())
    window._redraw_if_dirty()
    entries = [e for e in window.entries if e.role == "assistant" and e.steps]
    if entries:
        entry = entries[-1]
        window.select_token((entry.stream, min(args.select_token, len(entry.steps) - 1)))
    for _ in range(30):
        app.processEvents()
        window._redraw_if_dirty()
        time.sleep(0.02)
    window.grab().save(args.out)
    print(f"saved {args.out}; {window.status.model_label.text()}")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
