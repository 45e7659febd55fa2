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

from engine.cli.args import add_kv_flags, add_precision_flag, add_text_flags, load_scored_text


def add_fidelity_command(commands) -> None:
    fid = commands.add_parser("fidelity", help="compare the running precision with float32 on a text")
    add_text_flags(fid)
    add_precision_flag(fid)
    add_kv_flags(fid)
    fid.add_argument("--prefill-chunk", type=int, default=64, help=argparse.SUPPRESS)


def fidelity_command(args: argparse.Namespace) -> int:
    loaded, context, targets = load_scored_text(args)  # checks every flag first
    from engine.analysis.fidelity import check
    from engine.api.codec import CLI
    from engine.api.results import summarize
    from engine.runtime.text import TokenText

    tokenizer = loaded.tokenizer
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
    from engine.api.codec import CLI

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
