"""``python -m engine fidelity``: the running precision against float32 on a given text.

One ``token`` record per scored token (``index``, ``token_id``, ``text``, ``kld`` =
KL(float32 ‖ running) over the whole vocabulary in nats, ``top5_max_diff``,
``top_agrees``, ``logprob``, ``logprob_float32``), then one ``summary``.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.precision import PRECISIONS


def add_fidelity_command(commands) -> None:
    fid = commands.add_parser("fidelity", help="compare the running precision with float32 on a text")
    add_text_flags(fid)
    add_precision_flag(fid)
    fid.add_argument("--prefill-chunk", type=int, default=64, help=argparse.SUPPRESS)


def add_text_flags(p: argparse.ArgumentParser) -> None:
    """The model and a given text (or a chat reply to a prompt): what ``score`` and
    ``fidelity`` read."""
    p.add_argument("--model", default="default", help="default | PATH (folder or .gguf) | REPO")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to score")
    source.add_argument("--file", help="a UTF-8 text file to score")
    p.add_argument("--chat", action="store_true", help="the text is the assistant's reply to --prompt")
    p.add_argument("--prompt", help="with --chat: the user message the text answers")


def add_precision_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision",
        default="auto",
        choices=PRECISIONS,
        help=f"{' | '.join(PRECISIONS)}: what the model computes in (default auto)",
    )


def fidelity_command(args: argparse.Namespace) -> int:
    from engine.cli import _UsageError
    from engine.codec import CLI
    from engine.errors import EngineError

    if args.chat and not args.prompt:
        raise _UsageError("--chat needs --prompt: the user message the text answers.")
    if args.prefill_chunk <= 0:
        raise EngineError(f"--prefill-chunk must be positive, got {args.prefill_chunk}.")
    from engine.cli_score import read_text

    text = read_text(args)
    from engine.fidelity import check, summarize
    from engine.models import load
    from engine.prompts import scored_text
    from engine.text import TokenText

    loaded = load(args.model, precision=args.precision)
    tokenizer = loaded.tokenizer
    context, targets = scored_text(tokenizer, text, args.prompt if args.chat else None)
    tokens, first = context + targets, len(context) - 1
    pieces = TokenText(tokenizer)
    rows = []
    out = sys.stdout
    for row in check(loaded, tokens, chunk=args.prefill_chunk):
        if row.index < first:
            continue
        rows.append(row)
        record = {
            "type": "token",
            "index": row.index - first,
            "token_id": row.token_id,
            "text": pieces.piece(row.token_id),
            "kld": CLI.number(row.kld),
            "top5_max_diff": CLI.number(row.top5_max_diff),
            "top_agrees": row.top_agrees,
            "logprob": CLI.number(row.logprob),
            "logprob_float32": CLI.number(row.logprob_float32),
        }
        out.write(json.dumps(record) + "\n")
        out.flush()
    summary = summarize(loaded.precision.dtype, rows)
    out.write(json.dumps(summary_json(summary, loaded.precision.reason)) + "\n")
    return 0


def summary_json(summary, reason: str) -> dict:
    from engine.codec import CLI

    return {
        "type": "summary",
        "precision": summary.precision,
        "reference": "float32",
        "reason": reason,
        "tokens": summary.tokens,
        "kld_mean": CLI.number(summary.kld_mean),
        "kld_max": CLI.number(summary.kld_max),
        "top5_max_diff": CLI.number(summary.top5_max_diff),
        "top_agreement": round(summary.top_agreement, 5),
        "tolerance": summary.tolerance,
        "within_tolerance": summary.within_tolerance,
    }
