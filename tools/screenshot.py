"""``python -m tools.screenshot PATH``: the README's screenshots of a chat.

Runs the app offscreen with the default model in a throwaway profile, sends the prompt,
waits for the reply, selects token N (or the first token at which every stage named in
``--select-acted`` changed something), saves a screenshot of the whole window and exits.
With ``--compare PRESETS`` the prompt is answered by each preset side by side
(``--select-column K`` picks the column whose token is selected).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.api.events import TokenStep


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.screenshot")
    parser.add_argument("screenshot", metavar="PATH", help="where to save the screenshot (PNG)")
    parser.add_argument("--model", default=None, help="default | PATH | REPO")
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument("--select-token", type=int, default=None)
    parser.add_argument(
        "--select-acted",
        metavar="STAGES",
        default=None,
        help="comma-separated stage names: select the first token at which each of them removed a candidate "
        "or lowered one's probability",
    )
    parser.add_argument("--inspector-width", type=int, default=None, help="width of the inspector dock (px)")
    parser.add_argument("--sampling-width", type=int, default=None, help="width of the sampling dock (px)")
    parser.add_argument("--show-stage", default=None, help="the stage whose parameters the sampling panel shows")
    parser.add_argument("--theme", choices=["system", "light", "dark"], default=None)
    parser.add_argument("--color-tokens", action="store_true")
    parser.add_argument("--params", default=None, help="sampling parameters as JSON")
    parser.add_argument(
        "--compare",
        metavar="PRESETS",
        default=None,
        help="comma-separated preset names: answer with each side by side, over --params",
    )
    parser.add_argument("--select-column", type=int, default=0, help="the compare column of --select-token")
    parser.add_argument(
        "--compare-from",
        type=int,
        default=None,
        metavar="N",
        help="with --compare: answer with --params first, then compare the presets from token N of that reply",
    )
    parser.add_argument("--size", default="1500x900", help="window size for the screenshot, WIDTHxHEIGHT")
    parser.add_argument("--timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Logitscope")
    app.setOrganizationName("Logitscope")
    return screenshot(app, args)


def screenshot(app, args: argparse.Namespace) -> int:
    """Run one exchange in a throwaway profile and save the window."""
    import json

    from PySide6.QtCore import Qt

    from app.model.presets import apply_preset
    from engine.api.params import SamplingParams
    from tools.shot_window import scratch_window, show_at, waiter

    window = scratch_window(args.model or "default", "logitscope-shot-", args.theme or "light")
    window.color_toggle.setChecked(args.color_tokens)
    base = SamplingParams.from_dict(json.loads(args.params)) if args.params else window.controls.current
    window.controls.set_params(base)
    if args.compare:
        names = [n.strip() for n in args.compare.split(",") if n.strip()]
        presets = window.controls._all_presets()
        variants = [apply_preset(base, presets[name]) for name in names]
        for controls, params in zip(window.panel.variant_controls[1:], variants[1:], strict=False):
            controls.set_params(params)
        if args.compare_from is None:
            window.controls.set_params(variants[0])
        window.panel.set_compare(args.compare_from is None, len(names))
    if args.show_stage:
        window.controls.chain.select_stage(args.show_stage)
    show_at(window, args.size)
    if args.inspector_width:
        window.resizeDocks([window.inspector_dock], [args.inspector_width], Qt.Orientation.Horizontal)
    if args.sampling_width:
        window.resizeDocks([window.controls_dock], [args.sampling_width], Qt.Orientation.Horizontal)
    wait = waiter(app, args.timeout)
    if not wait(lambda: window.model_info is not None or window.last_error):
        print("error: the model did not load in time", file=sys.stderr)
        return 1
    if window.last_error:
        print(f"error: {window.last_error}", file=sys.stderr)
        return 1
    window.composer.setPlainText(args.prompt)
    window.send()
    wait(lambda: not window.busy())
    if args.compare and args.compare_from is not None:  # the reply above used --params as given
        window.controls.set_params(variants[0])
        window.panel.set_compare(True, len(names))
        window.compare_from_here((window.model.selection[0], args.compare_from))
        wait(lambda: not window.busy())
    window._redraw_if_dirty()
    run = window.model.shown_run()
    stream = run.columns[args.select_column].stream if run is not None else None
    if stream is None and window.model.selection is not None:
        stream = window.model.selection[0]
    steps = window.model.steps_of(stream) or []
    index = None
    if args.select_acted:
        stages = [s.strip() for s in args.select_acted.split(",") if s.strip()]
        index = next((i for i, s in enumerate(steps) if all(stage_acted(s, st) for st in stages)), None)
        if index is None:
            print(f"error: no token where {', '.join(stages)} all acted", file=sys.stderr)
            window.close()
            return 1
    elif args.select_token is not None and steps:
        index = min(args.select_token, len(steps) - 1)
    if index is not None:
        window.select_token((stream, index))
    for _ in range(5):
        window._redraw_if_dirty()
        app.processEvents()
        time.sleep(0.05)
    ok = window.grab().save(args.screenshot)
    window.close()
    if not ok:
        print(f"error: could not write {args.screenshot}", file=sys.stderr)
        return 1
    print(args.screenshot)
    return 0


def stage_acted(step: TokenStep, stage: str, nats: float = 0.1) -> bool:
    """Whether ``stage`` removed a candidate of ``step`` or lowered one's logprob by ``nats``."""
    i = step.stage_index(stage)
    if not i:
        return False
    return any(
        c.removed_by == stage or (c.logprobs[i] != -math.inf and c.logprobs[i] < c.logprobs[i - 1] - nats)
        for c in step.top
    )


if __name__ == "__main__":
    sys.exit(main())
