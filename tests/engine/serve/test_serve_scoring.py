"""``/v1/completions`` as OpenAI defines it, for scoring: ``prompt`` as a string, strings,
token ids or lists of ids (one row each, ``choices`` in order), ``echo`` through the engine's
scoring path (the numbers of ``python -m engine score``), ``max_tokens: 0``, ``n`` > 1 with
their seeds, and token ids checked. Through the ``openai`` SDK and plain HTTP."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.api.events import TokenStep
from engine.api.params import SamplingParams
from engine.caches.batch import common_prefix
from tests.engine.serve.serving import CHAT, HANG_GUARD_S, is_openai_error, post
from tests.support.paths import ROOT

TEXT = "The sea is deep and the sky is blue"
OTHER = "A cat sat on the mat"


def cli_score(folder, text: str) -> list[dict]:
    """``python -m engine score``'s token records for ``text``."""
    out = subprocess.run(
        [sys.executable, "-m", "engine", "score", "--model", str(folder), "--text", text],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=True,
    ).stdout
    return [r for r in map(json.loads, out.splitlines()) if r["type"] == "token"]


def scored(tiny_folder, text: str) -> list[TokenStep]:
    """The engine's scoring path in process (what the CLI runs), unrounded, on this thread's
    own session (MLX's streams belong to the thread that made them)."""
    from engine.analysis.score import score
    from engine.runtime.prompts import scored_text
    from engine.session.session import EngineSession

    session = EngineSession()
    session.load(str(tiny_folder))
    scheduler = session.scheduler
    context, targets = scored_text(scheduler.loaded.tokenizer, text, None)
    params = SamplingParams(temperature=0.0, top_logprobs=1)
    events = score(scheduler.loaded, context, targets, params, scheduler.vocabulary, scheduler.text)
    return [e for e in events if isinstance(e, TokenStep)]


def tokens_of(served, text: str) -> list[int]:
    return list(served.session.scheduler.loaded.tokenizer.encode(text))


def test_echo_scores_the_prompt_with_the_numbers_of_engine_score(served, client, tiny_folder):
    answer = client.completions.create(model="tiny", prompt=TEXT, echo=True, max_tokens=0, logprobs=1, temperature=0)
    (choice,) = answer.choices
    assert choice.text == TEXT and choice.finish_reason == "length"
    lp = choice.logprobs
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # nothing predicts the first token
    records = cli_score(tiny_folder, TEXT)
    assert len(lp.token_logprobs) == len(records) + 1 == len(tokens_of(served, TEXT))
    assert max(abs(a - r["raw_logprob"]) for a, r in zip(lp.token_logprobs[1:], records, strict=True)) <= 5e-6
    steps = scored(tiny_folder, TEXT)  # unrounded: exactly
    assert lp.token_logprobs[1:] == [s.logprob_at("raw") for s in steps]
    assert [max(t.values()) for t in lp.top_logprobs[1:]] == [max(s.logprob_at("raw", c) for c in s.top) for s in steps]
    assert answer.usage.prompt_tokens == len(records) + 1 and answer.usage.completion_tokens == 0


def test_the_four_prompt_forms_are_rows_in_order(served, client):
    a, b = tokens_of(served, TEXT), tokens_of(served, OTHER)
    kw = {"model": "tiny", "echo": True, "max_tokens": 0, "logprobs": 0, "temperature": 0}
    by_text = client.completions.create(prompt=[TEXT, OTHER], **kw)
    by_ids = client.completions.create(prompt=[a, b], **kw)
    one_text = client.completions.create(prompt=OTHER, **kw)
    one_ids = client.completions.create(prompt=b, **kw)
    assert [c.index for c in by_text.choices] == [c.index for c in by_ids.choices] == [0, 1]
    assert [c.text for c in by_text.choices] == [c.text for c in by_ids.choices] == [TEXT, OTHER]
    assert [len(c.logprobs.tokens) for c in by_ids.choices] == [len(a), len(b)]
    for many in (by_text, by_ids):  # a row of the batch scores as a request of its own
        assert many.choices[1].logprobs.token_logprobs == one_text.choices[0].logprobs.token_logprobs
    assert one_ids.choices[0].logprobs.token_logprobs == one_text.choices[0].logprobs.token_logprobs


def test_echo_with_a_completion_is_the_prompt_then_the_reply(served):
    body = {"prompt": TEXT, "max_tokens": 4, "logprobs": 2, "temperature": 0.8, "seed": 3}
    alone = post(served.url + "/completions", body).json()["choices"][0]
    echoed = post(served.url + "/completions", {**body, "echo": True}).json()["choices"][0]
    scored_only = post(served.url + "/completions", {**body, "echo": True, "max_tokens": 0}).json()["choices"][0]
    assert echoed["text"] == TEXT + alone["text"]
    n_prompt = len(scored_only["logprobs"]["tokens"])
    assert echoed["logprobs"]["token_logprobs"][:n_prompt] == scored_only["logprobs"]["token_logprobs"]
    assert echoed["logprobs"]["token_logprobs"][n_prompt:] == alone["logprobs"]["token_logprobs"]
    assert echoed["logprobs"]["tokens"][n_prompt:] == alone["logprobs"]["tokens"]


def test_n_choices_each_a_row_drawn_with_seed_plus_j(served):
    body = {"max_tokens": 5, "temperature": 1.0, "seed": 7, "logprobs": 0}
    many = post(served.url + "/completions", {**body, "prompt": [TEXT, OTHER], "n": 3}).json()
    assert [c["index"] for c in many["choices"]] == list(range(6))
    for i, prompt in enumerate((TEXT, OTHER)):
        for j in range(3):
            alone = post(served.url + "/completions", {**body, "prompt": prompt, "seed": 7 + j}).json()["choices"][0]
            got = many["choices"][i * 3 + j]
            assert (got["text"], got["logprobs"]["token_logprobs"]) == (
                alone["text"],
                alone["logprobs"]["token_logprobs"],
            ), (i, j)
    assert len({c["text"] for c in many["choices"][:3]}) > 1  # the seeds differ: so do the draws


def test_the_choices_of_an_item_sent_together_score_their_shared_context_once(served, tiny_folder):
    """lm-eval's multiple-choice request: the context with each choice, ``echo`` and
    ``max_tokens: 0``. The first choice computes the context; the others wait for it and
    take it (``usage.prompt_tokens_details.cached_tokens``), with the numbers of each scored
    alone."""
    context = "Question: which colour is the sky on a clear day? Answer:"
    prompts = [context + c for c in (" blue", " a field of green grass", " red")]
    body = {"prompt": prompts, "echo": True, "max_tokens": 0, "logprobs": 1, "temperature": 0}
    answer = post(served.url + "/completions", body).json()
    ids = [tokens_of(served, p) for p in prompts]
    shared = min(common_prefix(ids[0], t) for t in ids[1:])
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] >= 2 * (shared - 1) > 10
    for prompt, choice in zip(prompts, answer["choices"], strict=True):
        steps = scored(tiny_folder, prompt)
        assert choice["logprobs"]["token_logprobs"][1:] == [s.logprob_at("raw") for s in steps]
    # Sent again, each is all kept but its last token.
    again = post(served.url + "/completions", body).json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == sum(len(t) - 1 for t in ids)
    assert [c["logprobs"] for c in again["choices"]] == [c["logprobs"] for c in answer["choices"]]


@pytest.mark.parametrize(
    ("prompt", "param", "words"),
    [
        ([1, 2, 10**6], "prompt", "must be in"),
        ([[1, 2], [3, 10**6]], "prompt[1]", "must be in"),
        ([[1, 2], []], "prompt[1]", "at least one token"),
        ([1, -2], "prompt", "non-negative"),
        ([[1, 2], [3, True]], "prompt[1]", "non-negative integers"),
        ([[1, 2.5]], "prompt", "non-negative integers"),
        ([], "prompt", "non-empty"),
        (["a", [1, 2]], "prompt", "not both"),
        (["a", ""], "prompt[1]", "must not be empty"),
        (None, "prompt", "non-empty"),
    ],
)
def test_token_ids_are_checked_naming_the_prompt(served, prompt, param, words):
    answer = post(served.url + "/completions", {"prompt": prompt, "max_tokens": 1})
    assert answer.status_code == 400 and is_openai_error(answer.json()), answer.text
    assert answer.json()["error"]["param"] == param and words in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": TEXT, "max_tokens": 0}, "max_tokens"),  # scoring only needs echo
        ({"prompt": TEXT, "echo": True, "stream": True}, "stream"),  # answered whole only
        ({"prompt": [TEXT, OTHER], "stream": True}, "stream"),
        ({"prompt": TEXT, "n": 0}, "n"),
        ({"prompt": TEXT, "n": 300}, "n"),
        ({"prompt": TEXT, "echo": "yes"}, "echo"),
        ({"prompt": TEXT, "echo": True, "max_tokens": 0, "logit_bias": {"999999": 1}}, "logit_bias"),
    ],
)
def test_what_scoring_cannot_take_is_refused_naming_it(served, body, param):
    answer = post(served.url + "/completions", body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text


def test_echo_on_the_chat_endpoint_is_refused_not_ignored(served):
    answer = post(served.url + "/chat/completions", {"messages": CHAT, "echo": True, "max_tokens": 2})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "echo", answer.text
