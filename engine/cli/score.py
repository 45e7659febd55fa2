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
from engine.api.events import ScoreDone, TokenStep
from engine.cli.args import load_scored_text, params_from


def score_command(args: argparse.Namespace) -> int:
    params = params_from(args)  # validate before the slow model load
    loaded, context, targets = load_scored_text(args)  # checks every flag first
    from engine.analysis.score import score
    from engine.runtime.text import TokenText
    from engine.stages.vocabulary import Vocabulary

    pieces = TokenText(loaded.tokenizer)
    vocabulary = Vocabulary.of(loaded, pieces.piece)
    out = sys.stdout
    for event in score(loaded, context, targets, params, vocabulary, pieces, chunk=args.prefill_chunk):
        if isinstance(event, TokenStep):
            out.write(json.dumps(token_record(event, 0)) + "\n")  # with its rank
        elif isinstance(event, ScoreDone):
            out.write(json.dumps(score_done_record(event)) + "\n")
        out.flush()
    return 0
