"""``python -m tools.draft_shot --out PATH``: the README's screenshot of speculative decoding.

Runs the app offscreen in a throwaway profile with the default model, loads a draft
(``--draft``; default: the default GGUF re-quantized to Q4_0 by ``tools.requantize``, written
once into the temporary folder) through Models → Draft model…, sends ``--prompt``, colours
the chat by draft outcome, selects the first token whose proposal was rejected (the Draft
tab in view, both models' candidates side by side) and saves the window (1500×900).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tools.shot_window import add_window_flags, loaded_window, save_window, send_and_wait

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def default_draft() -> str:
    """The draft of bench figure 23: the default GGUF re-quantized to Q4_0 (written once)."""
    from bench.speculative import DRAFT_FOLDER
    from engine.models.load import default_model_path
    from tools.requantize import requantized

    return str(requantized(Path(default_model_path()), "Q4_0", DRAFT_FOLDER))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.draft_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--draft", default=None)
    p.add_argument("--tokens", type=int, default=3)
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--max-tokens", type=int, default=40)
    add_window_flags(p)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.model.draft import DraftChoice
    from app.views.inspector import DRAFT_TAB
    from engine.api.draft import Outcome
    from engine.api.params import SamplingParams

    draft = args.draft or default_draft()
    opened = loaded_window(args, "logitscope-draft-shot-")
    if opened is None:
        return 1
    app, window, wait = opened
    window.draft.use(DraftChoice(draft, "auto", args.tokens))
    if not wait(lambda: window.draft.held is not None):
        print("error: the draft did not load", file=sys.stderr)
        return 1
    no_eos = {t: -100.0 for t in window.model_info.eos_token_ids}
    window.controls.set_params(
        SamplingParams(temperature=0.0, max_tokens=args.max_tokens, top_logprobs=10, logit_bias=no_eos)
    )
    message = send_and_wait(window, wait, args.prompt)
    steps = message.branch.steps
    # The first rejected proposal; a draft that agrees everywhere (a model drafting for itself): its first block.
    rejected = (i for i, s in enumerate(steps) if s.draft is not None and s.draft.outcome is Outcome.REJECTED)
    index = next(rejected, min(1, len(steps) - 1))
    window.central.draft_toggle.setChecked(True)
    window.select_token((("branch", message.branch.id), index))
    window.inspector.tabs.setCurrentIndex(DRAFT_TAB)
    ok = save_window(app, window, args.out)
    print(window.draft.label.text(), "·", window.inspector.draft_view.header.text())
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
