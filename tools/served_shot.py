"""``python -m tools.served_shot --out PATH``: the README's screenshot of a served conversation.

Runs the app offscreen in a throwaway profile with the default model, starts serving on a
free port of 127.0.0.1, sends a chat request from the openai SDK (llama.cpp's ``top_k`` and
``min_p`` beside OpenAI's fields, the way SillyTavern sends them) on a thread of its own, opens
its conversation from the Served list while it streams, waits for its end, selects a token
where the model hesitated and saves the window (1500×900).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from tools.shot_window import add_window_flags, loaded_window, save_window

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France, and what is it known for?"},
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.served_shot")
    p.add_argument("--out", required=True)
    p.add_argument("--max-tokens", type=int, default=48)
    add_window_flags(p, timeline_height=300)
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import openai

    from app.views.serve_dialog import ServeChoice

    opened = loaded_window(args, "logitscope-served-shot-")
    if opened is None:
        return 1
    app, window, wait = opened
    if not window.serving.start(ServeChoice("127.0.0.1", 0, None)):
        return 1
    client = openai.OpenAI(base_url=window.serving.server.url, api_key="sk-local", max_retries=0, timeout=600)
    out: dict = {}

    def ask() -> None:
        try:
            out["reply"] = client.chat.completions.create(
                model="default",
                messages=MESSAGES,
                temperature=0.8,
                seed=11,
                max_tokens=args.max_tokens,
                logprobs=True,
                top_logprobs=5,
                extra_body={"top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1},
            )
        except Exception as exc:  # noqa: BLE001 - printed below
            out["error"] = exc

    threading.Thread(target=ask, daemon=True).start()
    served = window.model.served
    if not wait(lambda: served.live):
        return 1
    row = served.rows[0]
    window.serving.list.opened.emit(row.conversation_id)
    if not wait(lambda: "reply" in out or "error" in out) or "error" in out:
        print(out.get("error"), file=sys.stderr)
        return 1
    wait(lambda: not window.model.busy())
    message = window.thread_messages[-1]
    steps = message.branch.steps
    # Where the model hesitated most: the inspector shows a close call.
    index = max(range(len(steps)), key=lambda i: steps[i].entropy_raw or 0.0)
    window.select_token((("branch", message.branch.id), index))
    window.serving.dock.raise_()
    ok = save_window(app, window, args.out)
    print(repr(message.branch.text), "·", f"token {index}: {steps[index].piece!r}", "·", row.client, row.sent)
    window.serving.stop()
    window.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
