"""``python -m engine score``: a given text, token by token, as the model and a chain see it.

Token records are ``generate``'s (:mod:`engine.api.codec`: ``chain``, ``entropies``, per-candidate
``logprobs`` and ``removed_by``) plus ``rank``, the token's rank under ``raw``; one
``score_done`` ends.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.api.codec import score_done_record, token_record
from engine.api.errors import EngineError
from engine.api.events import ScoreDone, TokenStep
from engine.cli.args import check_chat, kv_from, params_from, read_text


def score_command(args: argparse.Namespace) -> int:
    params = params_from(args)  # validate before the slow model load
    check_chat(args)
    if args.prefill_chunk <= 0:
        raise EngineError(f"--prefill-chunk must be positive, got {args.prefill_chunk}.")
    kv = kv_from(args)
    text = read_text(args)
    from engine.analysis.score import score
    from engine.models.load import load
    from engine.runtime.prompts import scored_text
    from engine.runtime.text import TokenText
    from engine.stages.dry_state import BreakerCache

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
