"""``python -m tools.grammar_shot --out PATH``: the README's screenshot of structured output.

Runs the app offscreen in a throwaway profile with the default model, sets the Sampling
dock's Structured output to the Person schema preset, sends ``--prompt``, switches the
timeline's *masked by grammar* row on, selects the first token where the grammar overrode
the model's own first choice (the chain view shows ``✕ grammar`` on what it removed and, in
its header, the mass it took) and saves the window (1500×900).
"""

from __future__ import annotations

import argparse
import os
import sys

from tools.shot_window import add_window_flags, loaded_window, save_window, send_and_wait

PROMPT = "Describe a fictional person in JSON."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.grammar_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--preset", default="Person (JSON schema)")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--max-tokens", type=int, default=80)
    add_window_flags(p, timeline_height=300)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.views.inspector import CHAIN_TAB
    from engine.api.params import SamplingParams

    opened = loaded_window(args, "logitscope-grammar-shot-")
    if opened is None:
        return 1
    app, window, wait = opened
    window.controls.set_params(SamplingParams(temperature=0.7, seed=7, max_tokens=args.max_tokens, top_logprobs=10))
    window.controls.structured.apply_preset(args.preset)
    window.controls.chain.select_stage("grammar")
    message = send_and_wait(window, wait, args.prompt)
    steps = message.branch.steps
    index = next((i for i, s in enumerate(steps) if s.grammar is not None and s.grammar.wanted is not None), 0)
    row = next(c for c in window.step_analyses if c.row.__class__.__name__ == "GrammarRow")
    row.action.setChecked(True)
    window.select_token((("branch", message.branch.id), index))
    window.inspector.tabs.setCurrentIndex(CHAIN_TAB)
    window.controls.scroll.ensureWidgetVisible(window.controls.structured.text, 0, 0)
    ok = save_window(app, window, args.out)
    step = steps[index]
    print(repr(message.branch.text), "·", f"token {index}: {step.piece!r}", "·", step.grammar)
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
