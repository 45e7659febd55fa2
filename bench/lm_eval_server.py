"""Figure 30: a multiple-choice task evaluated by lm-evaluation-harness through
``engine.serve`` (its ``local-completions`` model, token prompts, ``num_concurrent`` 4, the
code of ``python -m engine serve`` on 127.0.0.1) against ``mlx_lm.evaluate``'s model in
process (``MLXLM``, the same lm-eval task) on the same model: the accuracy of each, the
largest per-choice loglikelihood difference, and items a second. Goals: the same accuracy,
loglikelihoods within 0.03, served / in process ≥ 1.0.

``python -m bench.lm_eval_server [--model default] [--out FILE.json]``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"loglikelihood_max_diff": 0.03, "served_over_in_process": 1.0}
ITEMS = [
    ("The capital of France is", [" Paris", " London", " Berlin", " Madrid"], 0),
    ("The capital of Japan is", [" Seoul", " Tokyo", " Beijing", " Bangkok"], 1),
    ("Water freezes at zero degrees", [" Fahrenheit", " Kelvin", " Celsius", " Rankine"], 2),
    ("The largest planet in the solar system is", [" Mars", " Venus", " Earth", " Jupiter"], 3),
    ("A week has seven", [" days", " hours", " months", " years"], 0),
    ("The opposite of hot is", [" warm", " cold", " red", " fast"], 1),
    ("Bees make", [" milk", " silk", " honey", " wool"], 2),
    ("The sun rises in the", [" west", " north", " south", " east"], 3),
    ("Two plus two equals", [" four", " five", " three", " six"], 0),
    ("The color of the sky on a clear day is", [" green", " blue", " purple", " orange"], 1),
    ("Fish live in", [" trees", " deserts", " water", " caves"], 2),
    ("A baby cat is called a", [" puppy", " calf", " foal", " kitten"], 3),
    ("Shakespeare wrote", [" Hamlet", " Faust", " Ulysses", " Dracula"], 0),
    ("The chemical symbol for gold is", [" Ag", " Au", " Fe", " Pb"], 1),
    ("Ice is frozen", [" air", " sand", " water", " oil"], 2),
    ("The first letter of the alphabet is", [" Z", " M", " Q", " A"], 3),
]


def write_task(folder: Path) -> None:
    rows = [{"question": q, "choices": c, "answer": a} for q, c, a in ITEMS]
    (folder / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "mc.yaml").write_text(
        "task: bench_mc\ndataset_path: json\ntest_split: test\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'mc.jsonl'}\noutput_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        'target_delimiter: ""\nmetric_list:\n  - metric: acc\n'
    )


def logliks(results: dict) -> list[list[float]]:
    samples = sorted(results["samples"]["bench_mc"], key=lambda s: s["doc_id"])
    return [[r[0][0] for r in s["resps"]] for s in samples]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lm_eval_server")
    parser.add_argument("--model", default="default")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    from engine.models.load import resolve
    from engine.serve.engine_loop import EngineLoop
    from engine.serve.server_thread import ServerThread
    from engine.session.session import EngineSession

    folder = str(resolve(args.model)[1])
    tasks = Path(tempfile.mkdtemp(prefix="bench-lm-eval-"))
    write_task(tasks)

    def manager() -> TaskManager:
        return TaskManager(include_path=str(tasks), include_defaults=False)

    def load() -> EngineSession:
        session = EngineSession(max_batch_size=8)
        session.load(folder)
        return session

    engine = EngineLoop(load)
    server = ServerThread(engine, "127.0.0.1", 0, None, None)
    model_args = {
        "model": args.model,
        "base_url": server.url + "/completions",
        "tokenizer_backend": "huggingface",
        "tokenizer": folder,
        "num_concurrent": 4,
        "max_retries": 1,
    }
    try:
        began = time.perf_counter()
        served = lm_eval.simple_evaluate(
            model="local-completions", model_args=model_args, tasks=["bench_mc"], task_manager=manager()
        )
        served_s = time.perf_counter() - began
    finally:
        server.stop(timeout=30)
        engine.close()
    from mlx_lm.evaluate import MLXLM  # after: its import leaves lm-eval's registry with its model alone

    mlx = MLXLM(folder)
    began = time.perf_counter()
    local = lm_eval.simple_evaluate(model=mlx, tasks=["bench_mc"], task_manager=manager())
    local_s = time.perf_counter() - began
    a, b = logliks(served), logliks(local)
    diff = max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))
    figure = {
        "model": args.model,
        "items": len(ITEMS),
        "served": {"acc": served["results"]["bench_mc"]["acc,none"], "items_per_s": len(ITEMS) / served_s},
        "mlx_lm_evaluate": {"acc": local["results"]["bench_mc"]["acc,none"], "items_per_s": len(ITEMS) / local_s},
        "loglikelihood_max_diff": diff,
        "goals": GOALS,
    }
    figure["served_over_in_process"] = figure["served"]["items_per_s"] / figure["mlx_lm_evaluate"]["items_per_s"]
    text = json.dumps(figure, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
