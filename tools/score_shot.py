"""``python -m tools.score_shot --out PATH``: the README's screenshot of a scored text.

Runs the app offscreen in a throwaway profile with the default model, scores ``--text``
(File → Score text…), selects token ``--select-token`` and saves the window (1500×900).
"""

from __future__ import annotations

import argparse
import os
import sys

from tools.shot_window import add_window_flags, loaded_window, save_window

PARAGRAPH = (
    "The Eiffel Tower was built for the 1889 World's Fair in Paris. At first many artists "
    "called it an eyesore, but it soon became the symbol of the city, and today millions "
    "of visitors climb its iron stairs every year."
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.score_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--text", default=PARAGRAPH)
    p.add_argument("--select-token", type=int, default=None, help="default: the least likely token")
    p.add_argument("--select-text", default=None, help="select the first token whose text contains this")
    add_window_flags(p, timeout=600.0)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    opened = loaded_window(args, "logitscope-score-shot-")
    if opened is None:
        return 1
    app, window, wait = opened
    scoring = window.score_controller()
    scoring.score_text(args.text)
    wait(lambda: not window.busy())
    window._redraw_if_dirty()
    message = window.model.last_assistant()
    steps = message.branch.steps
    index = args.select_token
    if args.select_text is not None:
        index = next((i for i, s in enumerate(steps) if args.select_text in s.piece), None)
    if index is None:
        index = min(range(len(steps)), key=lambda i: steps[i].logprob_at("raw"))
    window.select_token((("branch", message.branch.id), min(index, len(steps) - 1)))
    ok = save_window(app, window, args.out)
    print(scoring.perplexity_label.text())
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
