"""Writes ``store_v1.sqlite3``: a conversation saved by the release before the stage chain
(commit d847c8d: ``PRAGMA user_version`` 0, steps as format 1 with ``penalized_logprob``
and positional candidate lists). It must run against that commit's code:

    mkdir /tmp/old && git archive d847c8d app engine | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/data/make_store_v1.py tests/data/store_v1.sqlite3

The token steps are made by hand (no model) with the old pipeline's arithmetic on a
12-token vocabulary: bias, penalties -> ``penalized``; temperature, top-k, top-p, min-p
-> ``final``. tests/app/store/test_store_migration.py checks what the current store reads back.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import numpy as np

from app.store import Store  # the old store, from PYTHONPATH
from engine.api.events import Candidate, TokenStep
from engine.api.params import SamplingParams

VOCAB = ["<|im_end|>", " Paris", " Lyon", " the", " capital", ".", "\n", " is", " France", "é", " city", " of"]


def _logsoftmax(x: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x)
    m = x[finite].max()
    out = np.full_like(x, -np.inf)
    out[finite] = x[finite] - m - np.log(np.exp(x[finite] - m).sum())
    return out


def _entropy(lp: np.ndarray) -> float:
    finite = np.isfinite(lp)
    return float(-(np.exp(lp[finite]) * lp[finite]).sum())


def old_step(index: int, logits: list[float], params: SamplingParams, history: list[int], forced=None) -> TokenStep:
    raw = np.array(logits, dtype=np.float64)
    x = raw.copy()
    bias = np.zeros_like(x)
    for token, b in params.logit_bias.items():
        bias[token] = b
    x = x + bias
    before = x.copy()
    counts = np.bincount(np.array(history, dtype=int), minlength=len(x)) if history else np.zeros(len(x), int)
    seen = counts > 0
    x = np.where(seen & (x > 0), x / params.repetition_penalty, np.where(seen, x * params.repetition_penalty, x))
    x = x - params.presence_penalty * seen - params.frequency_penalty * counts
    penalty = x - before
    penalized = _logsoftmax(x)
    t = params.temperature if params.temperature > 0 else 1.0
    y = x / t
    if params.top_k:
        kth = np.sort(y)[::-1][min(params.top_k, len(y)) - 1]
        y = np.where(y >= kth, y, -np.inf)
    if params.top_p < 1.0:
        lp = _logsoftmax(y)
        order = np.argsort(-lp, kind="stable")
        cum = np.cumsum(np.exp(lp[order]))
        keep = order[: int(np.searchsorted(cum, params.top_p) + 1)]
        mask = np.full(len(y), -np.inf)
        mask[keep] = 0.0
        y = y + mask
    if params.min_p > 0.0:
        lp = _logsoftmax(y)
        y = np.where(lp >= lp.max() + np.log(params.min_p), y, -np.inf)
    final = _logsoftmax(y)
    rawlp = _logsoftmax(raw)
    chosen = forced if forced is not None else int(np.argmax(penalized if params.greedy else final))
    n = params.top_logprobs
    ids = list(dict.fromkeys([*np.argsort(-rawlp, kind="stable")[:n], *np.argsort(-final, kind="stable")[:n], chosen]))
    top = tuple(
        Candidate(
            token_id=int(i),
            text=VOCAB[i],
            raw_logit=float(raw[i]),
            raw_logprob=float(rawlp[i]),
            penalized_logprob=float(penalized[i]),
            logprob=float(final[i]),
            bias=float(bias[i]),
            penalty=float(penalty[i]),
            count=int(counts[i]),
        )
        for i in ids
    )
    return TokenStep(
        request_id=1,
        index=index,
        position=20 + index,
        token_id=chosen,
        text=VOCAB[chosen] if chosen else "",
        piece=VOCAB[chosen],
        raw_logprob=float(rawlp[chosen]),
        penalized_logprob=float(penalized[chosen]),
        logprob=float(final[chosen]),
        entropy_raw=_entropy(rawlp),
        entropy=_entropy(final),
        top=top,
        params=params,
        forced=forced is not None,
    )


def reply(params_per_step: list[SamplingParams], seed: int, forced_at: dict[int, int] | None = None) -> list[TokenStep]:
    rng = np.random.default_rng(seed)
    steps: list[TokenStep] = []
    history = [4, 11, 8, 7]  # " capital of France is" in the prompt
    for index, params in enumerate(params_per_step):
        logits = rng.normal(0.0, 2.5, len(VOCAB))
        step = old_step(
            index,
            list(logits),
            params,
            history[-params.penalty_window :] if params.penalty_window else history,
            (forced_at or {}).get(index),
        )
        steps.append(step)
        history.append(step.token_id)
    return steps


def main(path: str) -> None:
    Path(path).unlink(missing_ok=True)
    store = Store(path)
    greedy = SamplingParams(max_tokens=3, top_logprobs=4)
    sampled = SamplingParams(temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, seed=11, top_logprobs=4)
    penalized = SamplingParams(
        temperature=1.2,
        top_p=0.8,
        repetition_penalty=1.3,
        presence_penalty=0.5,
        frequency_penalty=0.2,
        penalty_window=64,
        logit_bias={1: 2.0, 0: -100.0},
        seed=5,
        top_logprobs=4,
        stop=("\n\n",),
    )
    bias_only = SamplingParams(top_k=3, logit_bias={2: 1.5}, top_logprobs=4)

    conversation = store.new_conversation("You are a helpful assistant.", "Capital of France")
    user = store.add_user_message(conversation.id, "What is the capital of France?", None)
    message = store.add_assistant_message(conversation.id, user.id)
    first = reply([greedy] * 3, seed=1)
    store.add_branch(message.id, first, "".join(s.text for s in first), "length", "SmolLM2-135M-Instruct", greedy)
    # A regeneration whose parameters changed after two tokens, then a picked token.
    second = reply([sampled, sampled, penalized, penalized, penalized], seed=2, forced_at={3: 9})
    branch = store.add_branch(
        message.id, second, "".join(s.text for s in second), "stop", "SmolLM2-135M-Instruct", sampled
    )
    follow = store.add_user_message(conversation.id, "And its second city?", branch.id)
    answer = store.add_assistant_message(conversation.id, follow.id)
    third = reply([bias_only] * 2, seed=3)
    store.add_branch(answer.id, third, "".join(s.text for s in third), "stop", "SmolLM2-135M-Instruct", bias_only)
    store.close()
    # One self-contained file: fold the WAL back in and leave rollback-journal mode.
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()


if __name__ == "__main__":
    main(sys.argv[1])
