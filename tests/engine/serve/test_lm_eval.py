"""lm-evaluation-harness (its ``local-completions`` model, as people evaluate a model behind an
OpenAI-compatible server) run against the server on the tiny model, with tasks of the tests'
own written in a temporary folder: every choice's loglikelihood equals ``engine score``'s
(the scoring path, in process) within 1e-4 and the accuracy equals the one those numbers
give, with text prompts, token prompts and batches of 4; a ``generate_until`` task reads the
engine's own greedy replies. A server that ignored ``echo`` would hand lm-eval the logprob
of one generated token and a wrong accuracy with no error (issue 56)."""

from __future__ import annotations

import json
import os

import pytest

from engine.api.events import TokenStep
from engine.api.params import SamplingParams

pytest.importorskip("lm_eval")

QUESTIONS = [
    ("The sea is", [" deep", " blue", " the sky", " in"]),
    ("A cat sat on", [" the mat", " a hat", " the", " in the"]),
    ("Once upon a time there", [" was", " were", " is the end", " a"]),
    ("The capital of France is", [" Paris", " London", " the", " in the north"]),
    ("Water boils at", [" 100 degrees", " the", " in", " sea level"]),
    ("She opened the", [" door", " window", " the", " in a box"]),
]
GENERATE = ["The sea is", "A cat sat on", "She opened the"]
TOLERANCE = 1e-4


def reference_logliks(session, context: str, choices: list[str]) -> list[float]:
    """Each choice's loglikelihood after ``context`` as lm-eval splits it, from the scoring
    path on the whole text (its first token the context): the sum of the choice's tokens'."""
    from engine.analysis.score import score
    from engine.runtime.prompts import encode_text

    scheduler = session.scheduler
    tokenizer = scheduler.loaded.tokenizer
    out = []
    for choice in choices:
        whole = encode_text(tokenizer, context + choice)
        n = len(whole) - len(encode_text(tokenizer, context))
        params = SamplingParams(temperature=0.0)
        events = score(scheduler.loaded, whole[:1], whole[1:], params, scheduler.vocabulary, scheduler.text)
        steps = [e for e in events if isinstance(e, TokenStep)]
        out.append(sum(s.logprob_at("raw") for s in steps[-n:]))
    return out


def greedy_reply(session, prompt: str) -> str:
    from engine.runtime.prompts import encode_text

    rid = session.scheduler.insert(
        encode_text(session.scheduler.loaded.tokenizer, prompt), SamplingParams(temperature=0.0, max_tokens=6)
    )
    steps = []
    while session.has_work():
        steps += [e for e in session.step() if isinstance(e, TokenStep) and e.request_id == rid]
    return "".join(s.text for s in steps if s.token_id not in session.info.eos_token_ids)


@pytest.fixture(scope="module")
def tasks(tiny_folder, tmp_path_factory):
    """The tasks' folder: a multiple-choice task whose gold answers are the model's own
    choices by ``engine score`` (so its accuracy is 1, and a choice read as 0 changes it),
    and a generation task whose targets are the engine's greedy replies."""
    from engine.session.session import EngineSession

    folder = tmp_path_factory.mktemp("lm-eval-tasks")
    session = EngineSession()  # this thread's own: MLX's streams belong to the thread that made them
    session.load(str(tiny_folder))
    rows, reference = [], []
    for question, choices in QUESTIONS:
        logliks = reference_logliks(session, question, choices)
        reference.append(logliks)
        rows.append({"question": question, "choices": choices, "answer": logliks.index(max(logliks))})
    assert len({r["answer"] for r in rows}) > 1, "every answer is the same choice: the task would not tell"
    (folder / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gen = [{"prompt": p, "target": greedy_reply(session, p)} for p in GENERATE]
    (folder / "gen.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gen))
    cache = tmp_path_factory.mktemp("datasets-cache")
    common = f"dataset_path: json\ntest_split: test\ndataset_kwargs:\n  cache_dir: {cache}\n  data_files:\n"
    (folder / "mc.yaml").write_text(
        "task: logitscope_mc\n"
        + common
        + f"    test: {folder / 'mc.jsonl'}\n"
        + "output_type: multiple_choice\n"
        + 'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        + 'target_delimiter: ""\nmetric_list:\n  - metric: acc\n'
    )
    (folder / "gen.yaml").write_text(
        "task: logitscope_gen\n"
        + common
        + f"    test: {folder / 'gen.jsonl'}\n"
        + "output_type: generate_until\n"
        + 'doc_to_text: "{{prompt}}"\ndoc_to_target: "{{target}}"\n'
        + "generation_kwargs:\n  until: []\n  max_gen_toks: 6\n  do_sample: false\n"
        + "metric_list:\n  - metric: exact_match\n"
    )
    return folder, reference, gen


def evaluate(served, tiny_folder, folder, task: str, tokenized: bool, batch_size: int) -> dict:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    args = {
        "model": "tiny",
        "base_url": served.url + "/completions",
        "tokenizer_backend": "huggingface",
        "tokenizer": str(tiny_folder),
        "tokenized_requests": tokenized,
        "max_retries": 1,
        "timeout": 120,
    }
    return lm_eval.simple_evaluate(
        model="local-completions",
        model_args=args,
        tasks=[task],
        batch_size=batch_size,
        task_manager=TaskManager(include_path=str(folder), include_defaults=False),
        log_samples=True,
    )


@pytest.mark.parametrize(
    ("tokenized", "batch_size"), [(False, 1), (True, 1), (True, 4)], ids=["text", "tokens", "tokens-batch4"]
)
def test_multiple_choice_loglikelihoods_and_accuracy_are_engine_scores(
    served, tiny_folder, tasks, tokenized, batch_size
):
    folder, reference, _ = tasks
    results = evaluate(served, tiny_folder, folder, "logitscope_mc", tokenized, batch_size)
    samples = sorted(results["samples"]["logitscope_mc"], key=lambda s: s["doc_id"])
    assert len(samples) == len(QUESTIONS)
    worst = 0.0
    for sample, want in zip(samples, reference, strict=True):
        got = [resp[0][0] for resp in sample["resps"]]
        worst = max(worst, *(abs(g - w) for g, w in zip(got, want, strict=True)))
    assert worst <= TOLERANCE, f"a loglikelihood {worst:.2e} away from engine score's"
    picks = [max(range(len(w)), key=w.__getitem__) for w in reference]
    right = sum(pick == s["doc"]["answer"] for s, pick in zip(samples, picks, strict=True))
    assert results["results"]["logitscope_mc"]["acc,none"] == right / len(QUESTIONS) == 1.0


@pytest.mark.parametrize("tokenized", [False, True], ids=["text", "tokens"])
def test_a_generate_until_task_reads_the_engines_greedy_replies(served, tiny_folder, tasks, tokenized):
    folder, _, gen = tasks
    results = evaluate(served, tiny_folder, folder, "logitscope_gen", tokenized, 1)
    samples = sorted(results["samples"]["logitscope_gen"], key=lambda s: s["doc_id"])
    assert [s["resps"][0][0] for s in samples] == [g["target"] for g in gen]
    assert results["results"]["logitscope_gen"]["exact_match,none"] == 1.0
