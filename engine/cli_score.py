"""``python -m engine score``: a given text, token by token, as the model and a chain see it.

Token records are ``generate``'s (:mod:`engine.codec`: ``chain``, ``entropies``, per-candidate
``logprobs`` and ``removed_by``) plus ``rank``, the token's rank under ``raw``; one
``score_done`` ends.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli import _UsageError, params_from
from engine.cli_fidelity import kv_from
from engine.codec import score_done_record, token_record
from engine.errors import EngineError
from engine.events import ScoreDone, TokenStep


def read_text(args: argparse.Namespace) -> str:
    if args.file is None:
        return args.text
    try:
        return Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EngineError(f"cannot read {args.file!r}: {exc}") from None


def score_command(args: argparse.Namespace) -> int:
    params = params_from(args)  # validate before the slow model load
    if args.chat and not args.prompt:
        raise _UsageError("--chat needs --prompt: the user message the text answers.")
    if args.prefill_chunk <= 0:
        raise EngineError(f"--prefill-chunk must be positive, got {args.prefill_chunk}.")
    kv = kv_from(args)
    text = read_text(args)
    from engine.dry import BreakerCache
    from engine.models import load
    from engine.prompts import scored_text
    from engine.score import score
    from engine.text import TokenText

    loaded = load(args.model, precision=args.precision, kv=kv)
    tokenizer = loaded.tokenizer
    context, targets = scored_text(tokenizer, text, args.prompt if args.chat else None)
    pieces = TokenText(tokenizer)
    breakers = BreakerCache(
        loaded.vocab_size, pieces.piece, lambda t: list(tokenizer.encode(t, add_special_tokens=False))
    )
    out = sys.stdout
    for event in score(loaded, context, targets, params, breakers, pieces, chunk=args.prefill_chunk):
        if isinstance(event, TokenStep):
            out.write(json.dumps(token_record(event, 0)) + "\n")  # with its rank
        elif isinstance(event, ScoreDone):
            out.write(json.dumps(score_done_record(event)) + "\n")
        out.flush()
    return 0
