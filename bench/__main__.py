"""``python -m bench [--json] [--plots DIR] [--only NAME ...] [--smoke]``: Logitscope against
mlx-lm, same run.

Every figure runs ours and the peer back to back in this process, on the same model,
prompt and settings, and reports medians. The default model is used where this machine
can run it in time; a synthetic random-weight model with the default tokenizer
(V = 49,152) where it cannot (long histories, 2,000-token runs).

Smoke runs (``--smoke``): every figure at its smallest size on small random models, in
seconds, so that ``tests/bench/test_bench_smoke.py`` (part of ``make test``) runs each one and a
figure that stopped running fails the tests, not the next bench run. Its numbers mean
nothing. How a figure takes part, the one convention (a figure added later follows it):

1. The figure is a function in its module that takes its model as an argument (or a model
   source, ``engine.models.load``'s words, where it loads the model itself) and its sizes as
   keyword arguments whose defaults are the full run's.
2. Its name goes in ``FIGURES`` and its entry in ``plan()``: a function of a :class:`Run`
   that calls the figure with ``run.model()`` (the default model), ``run.synthetic()`` (the
   synthetic llama), ``run.tiny()`` (the tests' tiny llama, in every run) or ``run.source()``
   (what to load), and ``**run.small(size=value, ...)``: its smallest sizes, which only a
   smoke run passes (its rows, if the table shows any, go in ``bench/table.py``). In a smoke
   run ``run.model()`` and ``run.synthetic()`` are one small llama (hidden 256, 2 layers, the
   tiny model's 267-token vocabulary, heads 64 wide as a quantized KV cache's group) and
   ``run.source()`` is its folder. A figure missing from ``plan()`` stops the run before
   anything runs. A figure whose smallest sizes are one flag, ``smoke: bool = False``, as
   the two of ``bench/step_graph.py`` (which make their own model), is given it the same way::

       "step_primitives": lambda run: step_graph.step_primitives(**run.small(smoke=True)),
       "tiny_decode": lambda run: step_graph.tiny_decode(**run.small(smoke=True)),

3. A figure that cannot run on this machine for want of something (Gemma's wheels) returns
   a string that says so, one of ``bench.common.UNAVAILABLE`` (the smoke test accepts exactly
   those); a figure that fails raises. Where it waits on the app's worker (a load, a reply),
   it waits with ``bench.guard.wait_for``, which ends on the worker's error or a time limit;
   a ``bench.guard.BenchError`` ends the run with one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.guard import BenchError
from bench.table import table

if TYPE_CHECKING:  # the engine (MLX) is imported when a figure first asks for a model
    from engine.models.load import LoadedModel

FIGURES = [
    "decode",
    "batched",
    "penalty_cost",
    "live_change",
    "prefix_reuse",
    "overhead",
    "memory",
    "chain_cost",
    "dry_cost",
    "compare",
    "prefill",
    "vocab_cost",
    "gui_scaling",
    "startup",
    "precision",
    "kvquant",
    "gemma",
    "views_open",
    "library",
    "step_primitives",
    "tiny_decode",
    "speculative",
    "grammar_cost",
    "serve_cost",
    "host_step",
    "draft_block",
    "serve_soak",
    "serve_burst",
]


def machine() -> dict:
    import os

    import mlx.core as mx

    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "python": platform.python_version(),
    }


class Run:
    """What a figure's entry in :func:`plan` is given: this run's models, each loaded once
    when a figure first asks, and its sizes (``small``)."""

    def __init__(self, smoke: bool, scratch: Path) -> None:
        self.smoke = smoke
        self.scratch = scratch  # a smoke run's models: written afresh, removed after the run
        self._models: dict[str, Any] = {}

    def small(self, **sizes: Any) -> dict[str, Any]:
        """``sizes`` in a smoke run, none in a full one (the figure's defaults)."""
        return sizes if self.smoke else {}

    def _once(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._models:
            self._models[name] = make()
        return self._models[name]

    def tiny(self) -> LoadedModel:
        """The tests' tiny llama (``tests/support/tiny_model.py``), in every run."""
        from bench.common import tiny_model

        return self._once("tiny", lambda: tiny_model(self.scratch / "tiny"))

    def tiny_folder(self) -> Path:
        """The tiny llama's folder (written first): a tokenizer for a figure's own small models."""
        self.tiny()
        return self.scratch / "tiny"

    def source(self) -> str:
        """What a figure that loads its own model loads: ``default``, or the smoke llama's folder."""
        if not self.smoke:
            return "default"
        self.model()
        return str(self.scratch / "smoke-llama")

    def model(self) -> LoadedModel:
        """The default model; the smoke llama in a smoke run."""
        if self.smoke:
            return self.synthetic()
        from bench.common import default_model

        return self._once("default", default_model)

    def synthetic_folder(self) -> str:
        """The folder :meth:`synthetic` loads (written first): for a figure that loads its own."""
        self.synthetic()
        if self.smoke:
            return str(self.scratch / "smoke-llama")
        return str(Path(tempfile.gettempdir()) / "logitscope-bench-synthetic")

    def synthetic(self) -> LoadedModel:
        """The synthetic llama with the default tokenizer; the smoke llama in a smoke run."""
        from bench.common import synthetic_model

        if self.smoke:
            folder, tokenizer = self.scratch / "smoke-llama", self.tiny_folder()  # its tokenizer and config
            return self._once("smoke", lambda: synthetic_model(folder, layers=2, tokenizer=tokenizer))
        folder = Path(tempfile.gettempdir()) / "logitscope-bench-synthetic"
        return self._once("synthetic", lambda: synthetic_model(folder))


Figure = Callable[[Run], "dict | str"]


def plan() -> dict[str, Figure]:
    """Each figure's entry: how it runs in a full run and, with ``run.small``, in a smoke run."""
    from bench import chain_cost, compare, memory, prefill, reuse, sampling_cost, step_graph, throughput, vocab_cost

    def lazy(module: str, function: str) -> Callable[..., Any]:
        # These modules import the app (Qt) or build files: only when their figure runs.
        return getattr(__import__(f"bench.{module}", fromlist=[function]), function)

    return {
        "decode": lambda run: throughput.decode_batch1(run.model(), **run.small(tokens=6, repeats=1)),
        "batched": lambda run: throughput.batched(run.model(), **run.small(sizes=(1, 2), steps=2, repeats=1)),
        "penalty_cost": lambda run: sampling_cost.penalty_cost(run.synthetic(), **run.small(histories=(100,), steps=2)),
        "live_change": lambda run: sampling_cost.live_change(run.model(), **run.small(repeats=1, steady_steps=2)),
        "prefix_reuse": lambda run: reuse.prefix_reuse(run.model(), **run.small(repeats=1, reply_tokens=4)),
        "overhead": lambda run: sampling_cost.overhead(run.model(), **run.small(sizes=(1, 2), steps=2)),
        # 12 requests: the slope after the prefix store fills (8 entries, + 2) needs two points.
        "memory": lambda run: memory.memory(run.synthetic(), **run.small(long_tokens=32, requests=12)),
        "chain_cost": lambda run: chain_cost.chain_cost(run.model(), **run.small(sizes=(1,), steps=2)),
        "dry_cost": lambda run: chain_cost.dry_cost(run.synthetic(), **run.small(histories=(100,), steps=2)),
        "compare": lambda run: compare.compare(run.model(), **run.small(sizes=(2,), steps=2, repeats=1)),
        "prefill": lambda run: prefill.prefill(run.model(), run.synthetic(), **run.small(tokens=64, repeats=1)),
        "vocab_cost": lambda run: vocab_cost.vocab_cost(
            **run.small(
                vocabs=(1000,),
                steps=2,
                hidden=64,
                layers=2,
                repeats=2,
                folder=run.scratch,
                tokenizer=run.tiny_folder(),
            )
        ),
        "gui_scaling": lambda run: lazy("gui_scaling", "gui_scaling")(
            **run.small(lengths=(100,), tokens=20, rate=1000.0, warmup=20, idle_s=0.2)
        ),
        "startup": lambda run: lazy("startup", "startup")(**run.small(later_runs=1, model=run.source())),
        "precision": lambda run: lazy("precision_cost", "precision_cost")(
            **run.small(sources={"smoke": run.source()}, repeats=1, tokens=4, prompt=16)
        ),
        "kvquant": lambda run: lazy("kv_quantization", "kv_quantization")(
            run.model(), **run.small(contexts=(64,), tokens=4, repeats=1)
        ),
        # Gemma alone converts for seconds: a smoke run runs the figure's code on its llama.
        "gemma": lambda run: throughput.real_vocabulary(
            run.model() if run.smoke else None, **run.small(tokens=6, repeats=1, steps=2)
        ),
        "views_open": lambda run: lazy("views_open", "views_open")(**run.small(tokens=4, rounds=1, model=run.source())),
        "library": lambda run: lazy("library_listing", "library_listing")(
            **run.small(hf=3, gguf_files=1, ollama=1, runs=1)
        ),
        "step_primitives": lambda run: step_graph.step_primitives(**run.small(smoke=True)),
        "tiny_decode": lambda run: step_graph.tiny_decode(**run.small(smoke=True)),
        "host_step": lambda run: step_graph.host_step(**run.small(smoke=True)),
        # A smoke run drafts the smoke llama for itself: the default GGUF is not re-quantized.
        "speculative": lambda run: lazy("speculative", "speculative")(
            *((run.model(), run.model()) if run.smoke else ()), **run.small(tokens=6, repeats=1)
        ),
        "grammar_cost": lambda run: lazy("grammar_cost", "grammar_cost")(
            run.model(), **run.small(sizes=(1,), large_vocab=None, steps=2, rounds=1)
        ),
        "draft_block": lambda run: lazy("draft_block", "draft_block_cost")(
            run.synthetic(), **run.small(histories=(20, 60), blocks=3)
        ),
        "serve_soak": lambda run: lazy("serve_soak", "serve_soak")(
            run.synthetic_folder(), **run.small(rounds=2, tokens=4)
        ),
        "serve_burst": lambda run: lazy("serve_burst", "serve_burst")(
            run.tiny_folder(), **run.small(requests=6, keep=3, idle_s=0.1)
        ),
        # A smoke run serves the smoke llama and leaves mlx_lm.server out (its start is slow).
        "serve_cost": lambda run: lazy("serve_cost", "serve_cost")(
            **run.small(source=run.source(), tokens=4, repeats=1, peer=False)
        ),
    }


def run_figures(only: list[str], smoke: bool = False) -> dict:
    entries = plan()
    missing = [name for name in FIGURES if name not in entries]
    if missing:
        raise BenchError(f"no entry in bench/__main__.py plan() for {', '.join(missing)}")
    results: dict = {"machine": machine(), "smoke": smoke, "seconds": {}}
    with tempfile.TemporaryDirectory(prefix="logitscope-bench-smoke-") as scratch:
        run = Run(smoke, Path(scratch))
        # A smoke run leaves nothing behind: the figures' own temporary folders (tempfile's
        # default folder, documented as settable) go into its scratch and are removed with it.
        # MLX's cache of compiled CPU kernels follows TMPDIR, not this, and stays warm.
        default_folder = tempfile.tempdir
        if smoke:
            tempfile.tempdir = scratch
        try:
            for name in FIGURES:
                if not only or name in only:
                    results[name] = _figure(name, entries[name], run, results["seconds"])
        finally:
            tempfile.tempdir = default_folder
    return results


def _figure(name: str, entry: Figure, run: Run, seconds: dict[str, float]) -> dict | str:
    start = time.perf_counter()
    try:
        result = entry(run)
    except BenchError as exc:
        raise BenchError(f"figure {name}: {exc}") from exc
    seconds[name] = round(time.perf_counter() - start, 1)
    print(f"# {name} done in {seconds[name]} s", file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--plots", type=Path, help="write batched.png and penalties.png into this folder")
    parser.add_argument("--only", nargs="*", choices=FIGURES, default=[])
    parser.add_argument(
        "--smoke", action="store_true", help="every figure at its smallest size on small models (seconds; not figures)"
    )
    args = parser.parse_args(argv)
    try:
        results = run_figures(args.only, args.smoke)
    except BenchError as exc:
        print(f"python -m bench: {exc}", file=sys.stderr)
        return 1
    if args.plots:
        from bench.plots import batched_plot, penalty_plot

        args.plots.mkdir(parents=True, exist_ok=True)
        if "batched" in results:
            batched_plot(results, args.plots / "bench-batched.png")
        if "penalty_cost" in results:
            penalty_plot(results, args.plots / "bench-penalties.png")
    print(json.dumps(results) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
