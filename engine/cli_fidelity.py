"""``python -m engine fidelity``: the running precision against float32 on a given text.

One ``token`` record per scored token (``index``, ``token_id``, ``text``, ``kld`` =
KL(float32 ‖ running) over the whole vocabulary in nats, ``top5_max_diff``,
``top_agrees``, ``logprob``, ``logprob_float32``), then one ``summary``. With ``--kv-bits``
the running pass quantizes its KV cache (the float32 pass does not), and the summary names
the setting (``kv_bits``, ``kv_group_size``, ``quantized_kv_start``).
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.kv_quantization import KV_BITS, KV_GROUP_SIZES, KVQuantization
from engine.precision import PRECISIONS


def add_fidelity_command(commands) -> None:
    fid = commands.add_parser("fidelity", help="compare the running precision with float32 on a text")
    add_text_flags(fid)
    add_precision_flag(fid)
    add_kv_flags(fid)
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


def add_kv_flags(p: argparse.ArgumentParser, whose: str = "the model's") -> None:
    """mlx-lm's KV-cache quantization flags (``engine.kv_quantization``)."""
    p.add_argument(
        "--kv-bits",
        type=int,
        default=None,
        choices=KV_BITS,
        help=f"quantize {whose} KV cache to this many bits (default: not quantized)",
    )
    p.add_argument(
        "--kv-group-size",
        type=int,
        default=64,
        choices=KV_GROUP_SIZES,
        help="with --kv-bits: numbers sharing one scale (default 64)",
    )
    p.add_argument(
        "--quantized-kv-start",
        type=int,
        default=0,
        help="with --kv-bits: quantize once a request holds this many tokens (default 0: from the first)",
    )


def kv_from(args: argparse.Namespace) -> KVQuantization:
    """The flags as a checked setting (a bad value is a usage error)."""
    from engine.cli import _UsageError
    from engine.errors import EngineError

    try:
        return KVQuantization(args.kv_bits, args.kv_group_size, args.quantized_kv_start)
    except EngineError as exc:
        raise _UsageError(str(exc)) from None


def fidelity_command(args: argparse.Namespace) -> int:
    from engine.cli import _UsageError
    from engine.codec import CLI
    from engine.errors import EngineError

    if args.chat and not args.prompt:
        raise _UsageError("--chat needs --prompt: the user message the text answers.")
    if args.prefill_chunk <= 0:
        raise EngineError(f"--prefill-chunk must be positive, got {args.prefill_chunk}.")
    kv = kv_from(args)
    from engine.cli_score import read_text

    text = read_text(args)
    from engine.fidelity import check, summarize
    from engine.models import load
    from engine.prompts import scored_text
    from engine.text import TokenText

    loaded = load(args.model, precision=args.precision, kv=kv)
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
    out.write(json.dumps({**summary_json(summary, loaded.precision.reason), **loaded.kv.to_dict()}) + "\n")
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
