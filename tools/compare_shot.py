"""``python -m tools.compare_shot --out PATH``: the README's screenshot of Compare models….

Runs the app offscreen in a throwaway profile with ``--model`` (default: the default model),
sends ``--prompt`` greedily for ``--max-tokens`` tokens, compares the reply with ``--second``
(default: the same model) computing in ``--precision`` (default float16), its KV cache
quantized with ``--kv-bits`` (default off), selects the token
of largest KL divergence and saves the window: the timeline's KLD row and the inspector's
Models tab side by side, the summary line in the status bar. Half precision is slow on a
CPU (MLX has no half-precision matrix kernels there): keep the reply short.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.compare_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--second", default=None, help="the model to compare with (default: --model)")
    p.add_argument("--precision", default="float16", help="what the second model computes in")
    p.add_argument("--kv-bits", type=int, default=0, choices=(0, 8, 4), help="the second model's KV cache (0: off)")
    p.add_argument("--prompt", default="Write one sentence about the sea.")
    p.add_argument("--max-tokens", type=int, default=12)
    p.add_argument("--timeline-height", type=int, default=360, help="height of the timeline dock (px)")
    p.add_argument("--inspector-width", type=int, default=640, help="width of the inspector dock (px)")
    p.add_argument("--size", default="1500x900")
    p.add_argument("--timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from engine.api.params import SamplingParams
    from tools.shot_window import scratch_window, show_at, waiter

    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = scratch_window(args.model, "logitscope-compare-shot-")
    show_at(window, args.size)
    window.resizeDocks([window.timeline_dock], [args.timeline_height], Qt.Orientation.Vertical)
    window.resizeDocks([window.inspector_dock], [args.inspector_width], Qt.Orientation.Horizontal)
    wait = waiter(app, args.timeout)
    if not wait(lambda: window.model_info is not None or window.last_error) or window.last_error:
        print(f"error: the model did not load ({window.last_error})", file=sys.stderr)
        return 1
    window.model.generation.send(args.prompt, SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    wait(lambda: not window.busy())
    stream = ("branch", window.model.last_assistant().branch.id)
    window.select_token((stream, 0))
    controller = window.compare_models
    dialog = controller.open_dialog()
    if dialog is None:
        print(f"error: cannot compare ({controller.unavailable()})", file=sys.stderr)
        return 1
    dialog.source.setCurrentText(args.second or args.model)
    dialog.precision.setCurrentIndex(dialog.precision.findData(args.precision))
    dialog.kv.setCurrentIndex(max(0, dialog.kv.findData(args.kv_bits)))  # after the precision: it may set it
    dialog.compare_button.click()
    comparison = None
    if wait(lambda: not dialog.running):
        comparison = controller.comparisons.of(stream)
    if comparison is None:
        print(f"error: the comparison did not finish ({dialog.message.text()})", file=sys.stderr)
        return 1
    dialog.close()
    window.select_token((stream, comparison.worst(1)[0].index))
    for _ in range(5):
        window._redraw_if_dirty()
        app.processEvents()
        time.sleep(0.05)
    ok = window.grab().save(args.out)
    print(comparison.summary_line())
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
