"""``python -m engine generate``: the JSON Lines contract, errors, and parity with mlx-lm."""

import json
import math
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from engine.runtime.prompts import encode_chat

PROMPTS = ["The capital of France is", "Once upon a time, there was a", "def fibonacci(n):"]
CHAT = "What is the capital of France?"
STEPS = 24


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "generate", *args],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def lines(proc) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.splitlines()]


def by_request(objects, request):
    return [o for o in objects if o["type"] == "token" and o["request"] == request]


def mlx_lm_greedy(loaded, prompt_ids, steps):
    """mlx-lm's own greedy decode; a logits processor records the raw logits it sees."""
    from mlx_lm.generate import generate_step

    seen = []

    def record(tokens, logits):
        seen.append(np.array(logits.astype(mx.float32))[0])
        return logits

    tokens = []
    for token, _ in generate_step(mx.array(prompt_ids), loaded.model, max_tokens=steps, logits_processors=[record]):
        token = int(token)
        tokens.append(token)
        if token in loaded.eos_token_ids:
            break
    return tokens, seen


def assert_parity(ours, loaded, prompt_ids):
    ref_tokens, ref_logits = mlx_lm_greedy(loaded, prompt_ids, STEPS)
    assert [o["token_id"] for o in ours] == ref_tokens
    assert len(ours) == STEPS or ours[-1]["token_id"] in loaded.eos_token_ids
    # generate_step computes one step ahead, so it may have seen one more row of logits.
    for step, logits in zip(ours, ref_logits[: len(ours)], strict=True):
        top5 = sorted((c for c in step["top"]), key=lambda c: -c["raw_logit"])[:5]
        for cand in top5:
            assert abs(cand["raw_logit"] - float(logits[cand["token_id"]])) < 0.1
        assert [c["token_id"] for c in top5] == list(np.argsort(-logits, kind="stable")[:5])


@pytest.mark.slow
def test_greedy_matches_mlx_lm_alone_and_batched(smollm):
    """The CLI's greedy tokens and logprobs equal mlx-lm's own, alone and batched, and for a chat.

    Slow: it starts ``python -m engine`` on the default model once per prompt and once
    batched, and runs mlx-lm's reference beside it."""
    common = ["--max-tokens", str(STEPS), "--temperature", "0", "--top-logprobs", "5"]
    batched = lines(cli(*[a for p in PROMPTS for a in ("--prompt", p)], *common))
    for i, prompt in enumerate(PROMPTS):
        ids = smollm.tokenizer.encode(prompt)
        alone = by_request(lines(cli("--prompt", prompt, *common)), 0)
        assert_parity(alone, smollm, ids)
        assert [o["token_id"] for o in by_request(batched, i)] == [o["token_id"] for o in alone]
    chat = by_request(lines(cli("--chat", "--prompt", CHAT, *common)), 0)
    chat_ids = encode_chat(smollm.tokenizer, [{"role": "user", "content": CHAT}])
    assert_parity(chat, smollm, chat_ids)
    assert "Paris" in "".join(o["text"] for o in chat)


SAMPLED_ARGS = "--max-tokens 4 --temperature 0.8 --top-p 0.9 --seed 3 --top-logprobs 3".split()
TOKEN_KEYS = {"type", "request", "index", "token_id", "text", "logprob", "raw_logprob"}
TOKEN_KEYS |= {"entropy_raw", "entropy", "top", "chain", "entropies", "survivors", "forced", "phase"}
CANDIDATE_KEYS = {"token_id", "text", "raw_logit", "raw_logprob", "logprob", "logprobs", "removed_by"}


def test_contract_shape_on_a_tiny_model(tiny_folder):
    model = ["--model", str(tiny_folder)]
    proc = cli(*model, "--prompt", "the cat", "--prompt", "a", *SAMPLED_ARGS)
    objects = lines(proc)
    assert proc.stderr == ""
    for request in (0, 1):
        tokens = by_request(objects, request)
        assert [t["index"] for t in tokens] == [0, 1, 2, 3]
        assert set(tokens[0]) == TOKEN_KEYS
        assert set(tokens[0]["top"][0]) == CANDIDATE_KEYS
        assert tokens[0]["chain"] == ["raw", "temperature", "top_p"]
        assert set(tokens[0]["entropies"]) == set(tokens[0]["chain"])
        for cand in tokens[0]["top"]:
            assert list(cand["logprobs"]) == tokens[0]["chain"]
            assert cand["logprob"] == cand["logprobs"]["top_p"]
            assert (cand["removed_by"] == "top_p") == (cand["logprob"] is None)
        (done,) = [o for o in objects if o["type"] == "done" and o["request"] == request]
        assert done["finish_reason"] == "length" and done["generated_tokens"] == 4
        assert {"prompt_tokens", "prompt_tps", "generation_tps"} <= set(done)
    # The same seed reproduces the same tokens, alone as in the batch.
    again = by_request(lines(cli(*model, "--prompt", "the cat", *SAMPLED_ARGS)), 0)
    assert [t["token_id"] for t in again] == [t["token_id"] for t in by_request(objects, 0)]


CHAIN_ARGS = [
    *("--max-tokens", "6", "--temperature", "1.2", "--seed", "5", "--top-logprobs", "4"),
    *("--samplers", "dry,xtc,top_n_sigma,typical_p,temperature", "--typical-p", "0.95", "--top-n-sigma", "2.5"),
    *("--xtc-probability", "1", "--xtc-threshold", "0.004", "--dry-multiplier", "2", "--dry-allowed-length", "1"),
    *("--dry-sequence-breaker", "\\n", "--dynatemp-range", "0.5", "--dynatemp-exponent", "2"),
]


def test_every_new_flag_reaches_the_chain(tiny_folder):
    proc = cli("--model", str(tiny_folder), "--prompt", "the the the the the the", *CHAIN_ARGS)
    tokens = by_request(lines(proc), 0)
    assert len(tokens) == 6
    for t in tokens:
        assert t["chain"][0] == "raw"
        # The order given, minus stages that did nothing for this token's row (DRY acts on repeats).
        stages = [s for s in t["chain"][1:]]
        order = ["dry", "xtc", "top_n_sigma", "typical_p", "temperature"]
        assert stages == [s for s in order if s in stages]
        assert {"xtc", "top_n_sigma", "typical_p", "temperature"} <= set(stages)
        survivors = [t["survivors"][s] for s in t["chain"]]
        assert survivors == sorted(survivors, reverse=True)  # truncation only removes
    # The repeated "the" is penalized by DRY on the first token.
    first = tokens[0]
    assert "dry" in first["chain"]
    again = by_request(lines(cli("--model", str(tiny_folder), "--prompt", "the the the the the the", *CHAIN_ARGS)), 0)
    assert [t["token_id"] for t in again] == [t["token_id"] for t in tokens]


def test_logit_bias_is_a_flag_and_reaches_the_bias_stage(tiny_folder):
    """``--logit-bias`` (issue 35): the app and the params had it, the CLI did not. A token
    pushed up by 100 nats is drawn at every step, the bias stage first in the chain; an id
    outside the vocabulary is refused before any token."""
    model = ("--model", str(tiny_folder), "--prompt", "the cat", "--max-tokens", "3", "--seed", "1")
    plain = by_request(lines(cli(*model)), 0)
    tokens = by_request(lines(cli(*model, "--logit-bias", '{"7": 100}')), 0)
    assert [t["token_id"] for t in tokens] == [7, 7, 7] != [t["token_id"] for t in plain]
    assert all(
        t["chain"][:2] == ["raw", "bias"] and "bias" not in p["chain"] for t, p in zip(tokens, plain, strict=True)
    )
    for t in tokens:  # the bias moved token 7 from its raw logprob to (nearly) certain
        (seven,) = [c for c in t["top"] if c["token_id"] == 7]
        assert seven["logprobs"]["bias"] > -1e-3 and seven["logprobs"]["raw"] < -1
    refused = cli(*model, "--logit-bias", '{"1000000": 1}', check=False)
    assert refused.returncode != 0 and refused.stdout == "" and "logit_bias" in refused.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--prompt", "x", "--samplers", "top_k,nope"], "samplers must name stages from grammar, penalties, dry"),
        (["--prompt", "x", "--samplers", "top_k,top_k"], "samplers must not repeat a stage"),
        (["--prompt", "x", "--typical-p", "0"], "typical_p must be in"),
        (["--prompt", "x", "--dry-penalty-last-n", "-2"], "dry_penalty_last_n must be in"),
        (["--prompt", "x", "--top-p", "0"], "top_p must be in"),
        (["--prompt", "x", "--temperature", "nan"], "temperature must be a finite number"),
        (["--prompt", "x", "--max-tokens", "zero"], "invalid int value"),
        (["--prompt", "x", "--model", "/no/such/model.gguf"], "no such file"),
        (["--prompt", "x", "--model", "/"], "config.json"),
        ([], "--prompt"),
        (["--prompt", "x", "--logit-bias", "[7]"], "--logit-bias must be a JSON object"),
        (["--prompt", "x", "--logit-bias", '{"seven": 1}'], "logit_bias keys must be token ids"),
        (["--prompt", "x", "--logit-bias", '{"7": "up"}'], "logit_bias"),
    ],
)
def test_errors_are_one_line_without_traceback(args, needle):
    proc = cli(*args, check=False)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_variants_share_one_prefill_and_each_equals_its_solo_run(tiny_folder):
    model = ["--model", str(tiny_folder), "--prompt", "the cat sat", "--max-tokens", "5", "--seed", "2"]
    variants = ['{"temperature": 0}', '{"temperature": 1.3, "top_k": 7}', '{"temperature": 0.9, "seed": 9}']
    objects = lines(cli(*model, *[a for v in variants for a in ("--variant", v)]))
    dones = sorted((o for o in objects if o["type"] == "done"), key=lambda o: o["request"])
    assert [d["prefilled_tokens"] for d in dones] == [dones[0]["prompt_tokens"], 0, 0]
    divergences = [o for o in objects if o["type"] == "divergence"]
    assert [d["index"] for d in divergences] == list(range(5))
    assert divergences[0]["pairs"] == [[0, 1], [0, 2], [1, 2]]
    assert all(0.0 <= v <= math.log(2) + 1e-6 for d in divergences for v in d["js"])
    for i, flags in enumerate([["--temperature", "0"], ["--temperature", "1.3", "--top-k", "7"]]):
        alone = by_request(lines(cli(*model, *flags)), 0)
        assert [t["token_id"] for t in by_request(objects, i)] == [t["token_id"] for t in alone]
    alone = by_request(lines(cli(*model[:-1], "9", "--temperature", "0.9")), 0)
    assert [t["token_id"] for t in by_request(objects, 2)] == [t["token_id"] for t in alone]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--variant", '{"temp": 1}'], "unknown sampling parameter 'temp'"),
        (["--variant", "{nope"], "--variant 0 is not valid JSON"),
        (["--variant", "[1]"], "must be a JSON object"),
        (["--variant", '{"top_p": 2}'], "top_p must be in"),
        (["--prompt", "y", "--variant", "{}"], "--variant forks one --prompt, got 2"),
    ],
)
def test_bad_variants_are_one_line_errors(args, needle):
    proc = cli("--prompt", "x", *args, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
