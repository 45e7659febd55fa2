"""``python -m engine lens``: the logit lens at a prompt position, one record per layer.

``{"type": "layer", "position", "layer", "top": [{"token_id", "text", "logprob"}],
"entropy", "kl_final", "rank_final_top1", "rank_chosen", "chosen_logprob", "final_top_logprobs"}`` for layers 0
(the embedding output) … L, then ``{"type": "position", "position", "chosen", "text",
"chosen_is_next", "decided_at"}``. The default position is the last prompt token: the
distribution of the first generated token, whose "chosen" token is then the final top-1.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli.args import add_precision_flag


def add_lens_command(commands) -> None:
    p = commands.add_parser("lens", help="the logit lens: each layer's next-token distribution")
    p.add_argument("--model", default="default", help="default | PATH (folder or .gguf) | REPO")
    p.add_argument("--prompt", required=True)
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message")
    p.add_argument("--position", type=int, default=None, help="token index (default: the last)")
    p.add_argument("--all-positions", action="store_true", help="every position of the prompt")
    p.add_argument("--top", type=int, default=10)
    add_precision_flag(p)


def lens_command(args: argparse.Namespace) -> int:
    from engine.analysis.lens import lens
    from engine.api.lens_records import lens_records
    from engine.models.load import load
    from engine.runtime.prompts import encode_chat, encode_text
    from engine.runtime.text import TokenText

    loaded = load(args.model, precision=args.precision)
    tokenizer = loaded.tokenizer
    messages = [{"role": "user", "content": args.prompt}]
    tokens = encode_chat(tokenizer, messages) if args.chat else encode_text(tokenizer, args.prompt)
    if args.all_positions:
        positions = list(range(len(tokens)))
    else:
        positions = [len(tokens) - 1 if args.position is None else args.position]
    piece = TokenText(tokenizer).piece
    out = sys.stdout
    for p in lens(loaded, tokens, positions, args.top):
        for record in lens_records([p], piece):
            out.write(json.dumps(record) + "\n")
        out.flush()
    return 0
